"""PyTorch's plain equivalents of opgate's GPU probes, for the evidence table beside each probe figure.

What a user would write without opgate: `x.sum()` over a large tensor (a read stream), `dst.copy_(src)`
between device tensors, `dev.copy_(pinned, non_blocking=True)` and back (host links), and a one-element
`x.add_(1)` launched eagerly or replayed from a `torch.cuda.CUDAGraph` (launch overhead). Each is timed with
torch's own CUDA events on its current stream, medians of repeated runs after warm-up, and checked for the
right answer, so a figure is never reported for work that did not happen. torch is imported only here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opgate.gpu.stats import Samples
from opgate.gpu.timing import time_torch_events

MiB = 1 << 20


@dataclass(frozen=True)
class TorchFigure:
    label: str
    value: float  # from the median sample
    unit: str
    samples: Samples
    samples_unit: str  # "ms" per run for bandwidths, "us" per op for launches
    what: str  # the PyTorch code timed

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "value": self.value, "unit": self.unit, "what": self.what,
                "samples": self.samples.summary(), "samples_unit": self.samples_unit}


def _torch_cuda(device: int) -> Any:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("PyTorch sees no CUDA device (a CPU-only build?)")
    torch.cuda.set_device(device)
    return torch


def hbm_read(device: int, nbytes: int, reps: int = 20) -> TorchFigure:
    """`x.sum()` over `nbytes` of float32: a reduction reads every byte once."""
    torch = _torch_cuda(device)
    n = nbytes // 4
    x = torch.ones(n, dtype=torch.float32, device="cuda")
    out = torch.empty((), dtype=torch.float32, device="cuda")
    samples = time_torch_events(torch, lambda: torch.sum(x, dim=0, out=out), warmup=3, reps=reps)
    if abs(float(out) - n) > 1e-4 * n:  # float32 partial sums of ones: exact to well within this
        raise RuntimeError(f"x.sum() returned {float(out)}, not {n}: the figure would be meaningless")
    del x
    torch.cuda.empty_cache()
    return TorchFigure("HBM read, PyTorch x.sum()", n * 4 / (samples.median * 1e-3) / 1e12, "TB/s", samples, "ms",
                       f"torch.sum over {n * 4 / 2**30:.2f} GiB of float32")


def host_copies(device: int, nbytes: int = 256 * MiB, reps: int = 8) -> tuple[TorchFigure, TorchFigure]:
    """Pinned host <-> device with `copy_(..., non_blocking=True)`: (H2D, D2H), GB/s."""
    torch = _torch_cuda(device)
    host = torch.randint(1, 255, (nbytes,), dtype=torch.uint8).pin_memory()
    back = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    h2d = time_torch_events(torch, lambda: dev.copy_(host, non_blocking=True), warmup=2, reps=reps)
    d2h = time_torch_events(torch, lambda: back.copy_(dev, non_blocking=True), warmup=2, reps=reps)
    if not torch.equal(back[:4096], host[:4096]) or not torch.equal(back[-4096:], host[-4096:]):
        raise RuntimeError("pinned round trip through PyTorch returned different bytes")
    del dev
    torch.cuda.empty_cache()
    what = f"{nbytes // MiB} MiB, pinned host tensor, copy_(non_blocking=True)"
    return (TorchFigure("H2D pinned, PyTorch copy_", nbytes / (h2d.median * 1e-3) / 1e9, "GB/s", h2d, "ms", what),
            TorchFigure("D2H pinned, PyTorch copy_", nbytes / (d2h.median * 1e-3) / 1e9, "GB/s", d2h, "ms", what))


def launch_overhead(device: int, ops_per_run: int = 1000, runs: int = 7) -> tuple[TorchFigure, TorchFigure]:
    """A one-element `x.add_(1)`, `ops_per_run` times: eager per op, and replayed from a CUDA graph per op (us)."""
    torch = _torch_cuda(device)
    x = torch.zeros(1, dtype=torch.float32, device="cuda")

    def burst() -> None:
        for _ in range(ops_per_run):
            x.add_(1)

    eager = time_torch_events(torch, burst, warmup=1, reps=runs)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as PyTorch's graph docs ask
        burst()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        burst()
    replay = time_torch_events(torch, graph.replay, warmup=1, reps=runs)
    # eager warm-up + runs, the side-stream warm-up, graph warm-up + runs (capturing runs nothing)
    expected = ops_per_run * ((1 + runs) + 1 + (1 + runs))
    if float(x) != float(expected):
        raise RuntimeError(f"x counted {float(x):.0f} additions, not the {expected} enqueued: launches were lost")
    eager_us = Samples.of([ms * 1e3 / ops_per_run for ms in eager.values])
    replay_us = Samples.of([ms * 1e3 / ops_per_run for ms in replay.values])
    what = f"{ops_per_run} x x.add_(1) on a 1-element tensor"
    return (TorchFigure("eager launch per op, PyTorch", eager_us.median, "us", eager_us, "us", what),
            TorchFigure("CUDA graph replay per op, PyTorch", replay_us.median, "us", replay_us, "us", what))


def peer_copy(src: int, dst: int, nbytes: int = 128 * MiB, reps: int = 5) -> TorchFigure:
    """`b.copy_(a)` from GPU `src` to GPU `dst` (PyTorch uses the peer path when the pair allows it), GB/s."""
    torch = _torch_cuda(src)
    a = torch.randint(1, 255, (nbytes,), dtype=torch.uint8, device=f"cuda:{src}")
    b = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{dst}")
    samples = time_torch_events(torch, lambda: b.copy_(a, non_blocking=True), warmup=2, reps=reps)
    torch.cuda.synchronize(dst)
    if not torch.equal(a[:4096].cpu(), b[:4096].cpu()) or not torch.equal(a[-4096:].cpu(), b[-4096:].cpu()):
        raise RuntimeError(f"GPU {src} -> GPU {dst} copy through PyTorch delivered different bytes")
    return TorchFigure(f"GPU {src} -> GPU {dst}, PyTorch copy_", nbytes / (samples.median * 1e-3) / 1e9, "GB/s",
                       samples, "ms", f"{nbytes // MiB} MiB, b.copy_(a, non_blocking=True) across devices")
