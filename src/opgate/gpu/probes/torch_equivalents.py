"""PyTorch's plain equivalents of opgate's GPU probes, for the evidence table beside each probe figure.

What a user would write without opgate: `x.sum()` over a large tensor (a read stream), `dst.copy_(src)`
between device tensors, `dev.copy_(pinned, non_blocking=True)` and back (host links), a one-element
`x.add_(1)` launched eagerly or replayed from a `torch.cuda.CUDAGraph` (launch overhead), the same on a
`torch.cuda.Stream(priority=-1)` while other streams keep the GPU busy (stream priority), and
`torch.cuda.Event` around `torch.cuda._sleep` of varied length (event timer step) and back to back. Each is timed with
torch's own CUDA events on its current stream, medians of repeated runs after warm-up, and checked for the
right answer (ProbeError when it is not), so a figure is never reported for work that did not happen. torch is
imported only here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opgate.gpu.probes.device import GpuUnavailable, ProbeError
from opgate.gpu.probes.timing import Samples
from opgate.gpu.probes.timing import time_torch_events

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
        raise GpuUnavailable("PyTorch is installed but sees no CUDA device (a CPU-only build?)")
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
        raise ProbeError(f"x.sum() returned {float(out)}, not {n}: the figure would be meaningless")
    x = None  # freed before empty_cache (the timed lambda still holds the name, so not `del`)
    torch.cuda.empty_cache()
    return TorchFigure("HBM read, PyTorch x.sum()", n * 4 / (samples.median * 1e-3) / 1e12, "TB/s", samples, "ms",
                       f"torch.sum over {n * 4 / 2**30:.2f} GiB of float32")


def device_copy(device: int, nbytes: int, reps: int = 20) -> TorchFigure:
    """`dst.copy_(src)` between two device tensors of `nbytes`: TB/s counting bytes read + written (the doctor's
    HBM check reports it beside opgate's copy kernel and cudaMemcpy)."""
    torch = _torch_cuda(device)
    with torch.cuda.device(device):
        src = torch.randint(1, 255, (nbytes,), dtype=torch.uint8, device=f"cuda:{device}")
        dst = torch.empty_like(src)
        samples = time_torch_events(torch, lambda: dst.copy_(src), warmup=3, reps=reps)
        if not torch.equal(src[:4096], dst[:4096]) or not torch.equal(src[-4096:], dst[-4096:]):
            raise ProbeError("PyTorch's copy_ produced different bytes: the figure would be meaningless")
        src = dst = None  # freed before empty_cache (the timed lambda still holds the names)
        torch.cuda.empty_cache()
    return TorchFigure("D2D copy, PyTorch dst.copy_(src)", 2 * nbytes / (samples.median * 1e-3) / 1e12, "TB/s",
                       samples, "ms", f"torch {torch.__version__}, {nbytes // MiB} MiB dst.copy_(src) on the device")


def host_copies(device: int, nbytes: int = 256 * MiB, reps: int = 8) -> tuple[TorchFigure, TorchFigure]:
    """Pinned host <-> device with `copy_(..., non_blocking=True)`: (H2D, D2H), GB/s."""
    torch = _torch_cuda(device)
    host = torch.randint(1, 255, (nbytes,), dtype=torch.uint8).pin_memory()
    back = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    h2d = time_torch_events(torch, lambda: dev.copy_(host, non_blocking=True), warmup=2, reps=reps)
    d2h = time_torch_events(torch, lambda: back.copy_(dev, non_blocking=True), warmup=2, reps=reps)
    if not torch.equal(back[:4096], host[:4096]) or not torch.equal(back[-4096:], host[-4096:]):
        raise ProbeError("pinned round trip through PyTorch returned different bytes")
    dev = None  # freed before empty_cache (the timed lambdas still hold the name)
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
        raise ProbeError(f"x counted {float(x):.0f} additions, not the {expected} enqueued: launches were lost")
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
        raise ProbeError(f"GPU {src} -> GPU {dst} copy through PyTorch delivered different bytes")
    return TorchFigure(f"GPU {src} -> GPU {dst}, PyTorch copy_", nbytes / (samples.median * 1e-3) / 1e9, "GB/s",
                       samples, "ms", f"{nbytes // MiB} MiB, b.copy_(a, non_blocking=True) across devices")


def event_timer_step(device: int, fine_readings: int = 200) -> TorchFigure:
    """`torch.cuda.Event(enable_timing=True)` around `torch.cuda._sleep(cycles)`, 0..8000 cycles in 41-cycle steps
    and 0..46000 in 1999-cycle steps (about 0-4 us finely and 0-23 us coarsely on a ~2 GHz GPU, as the opgate
    probe's waits): the smallest gap between distinct timed durations is the step PyTorch's event timing moves in,
    found as opgate's event probe finds its own (`opgate.gpu.probes.events.timer_step_ns`)."""
    from opgate.gpu.probes.events import timer_step_ns

    torch = _torch_cuda(device)
    stream = torch.cuda.current_stream()
    torch.cuda._sleep(1000)  # load the sleep kernel before the measured run
    cycles = [41 * i for i in range(fine_readings)] + [1999 * i for i in range(24)]
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in cycles]
    for sleep_cycles, (start, end) in zip(cycles, pairs):
        start.record(stream)
        torch.cuda._sleep(sleep_cycles)
        end.record(stream)
    torch.cuda.synchronize()
    durations_ns = [a.elapsed_time(b) * 1e6 for a, b in pairs]
    step, distinct = timer_step_ns(durations_ns)
    if step is None:
        raise ProbeError(f"only {distinct} distinct durations among {len(cycles)} timed sleeps: no step to report")
    return TorchFigure("event timer step, PyTorch", step / 1e3, "us", Samples.of([d / 1e3 for d in durations_ns]),
                       "us", f"{len(cycles)} torch.cuda.Event pairs around torch.cuda._sleep(0..46000 cycles), "
                       f"smallest gap among {distinct} distinct durations")


def event_timing(device: int, back_to_back: int = 256) -> TorchFigure:
    """`torch.cuda.Event(enable_timing=True)` recorded back to back with no work between: the smallest non-zero
    interval is the finest step PyTorch's event timing shows (opgate's event probe reports the same)."""
    torch = _torch_cuda(device)
    stream = torch.cuda.current_stream()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(back_to_back)]
    events[0].record(stream)  # warm-up record, then the measured run
    torch.cuda.synchronize()
    for event in events:
        event.record(stream)
    torch.cuda.synchronize()
    intervals = [a.elapsed_time(b) * 1e3 for a, b in zip(events, events[1:])]
    positive = [v for v in intervals if v > 0]
    if not positive:
        raise ProbeError(f"all {len(intervals)} back-to-back event intervals read 0: no timing step to report")
    return TorchFigure("event timing step, PyTorch", min(positive), "us", Samples.of(intervals), "us",
                       f"{back_to_back} torch.cuda.Event records back to back, smallest non-zero interval")


def stream_priority(device: int, samples: int = 15, hog_mib: int = 512, hogs_per_stream: int = 30,
                    low_streams: int = 2) -> tuple[TorchFigure, TorchFigure]:
    """A one-element `x.add_(1)` on `torch.cuda.Stream(priority=-1)` and on a priority-0 stream while other
    priority-0 streams keep the GPU busy with large `h.mul_(1.0)` ops: microseconds per probe (high, equal).
    A sample counts only when the busy work was still running after the probe finished."""
    torch = _torch_cuda(device)
    low = [torch.cuda.Stream(priority=0) for _ in range(low_streams)]
    high, equal = torch.cuda.Stream(priority=-1), torch.cuda.Stream(priority=0)
    if high.priority >= equal.priority:
        raise ProbeError(f"PyTorch gave the high-priority stream priority {high.priority}, not above "
                           f"{equal.priority}: this device or build has no stream priorities")
    hogs = [torch.ones(hog_mib * MiB // 4, device="cuda") for _ in low]
    x = torch.zeros(1, device="cuda")
    probes = 0

    def probe(stream: Any) -> float:
        nonlocal probes
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record()
            x.add_(1)
            end.record()
        probes += 1
        end.synchronize()
        return start.elapsed_time(end) * 1e3

    def saturated(stream: Any) -> Samples:
        values: list[float] = []
        tries = 0
        while len(values) < samples and tries < 8 * samples:
            tries += 1
            done = []
            for low_stream, hog in zip(low, hogs):
                with torch.cuda.stream(low_stream):
                    for _ in range(hogs_per_stream):
                        hog.mul_(1.0)
                    done.append(torch.cuda.Event())
                    done[-1].record()
            us = probe(stream)
            if not all(event.query() for event in done):  # the GPU stayed busy for the whole probe
                values.append(us)
            torch.cuda.synchronize()
        if len(values) < samples:
            raise ProbeError(f"the busy work had finished before the probe did in {tries - len(values)} of "
                               f"{tries} tries: the GPU could not be kept busy")
        return Samples.of(values)

    for stream in (*low, high, equal):  # warm-up on every stream
        probe(stream)
    equal_us = saturated(equal)
    high_us = saturated(high)
    torch.cuda.synchronize()
    if float(x) != float(probes):
        raise ProbeError(f"x counted {float(x):.0f} additions, not the {probes} probes enqueued")
    if not all(bool((hog == 1.0).all()) for hog in hogs):
        raise ProbeError("the busy work changed its tensors: mul_(1.0) must leave ones")
    what = (f"x.add_(1) on torch.cuda.Stream(priority=-1) vs priority 0, {low_streams} priority-0 streams each "
            f"running {hogs_per_stream} x mul_(1.0) over {hog_mib} MiB")
    return (TorchFigure("probe latency, high priority, GPU busy, PyTorch", high_us.median, "us", high_us, "us", what),
            TorchFigure("probe latency, equal priority, GPU busy, PyTorch", equal_us.median, "us", equal_us, "us",
                        what))
