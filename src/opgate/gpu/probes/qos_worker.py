"""Child process of the QoS probe: `python -m opgate.gpu.probes.qos_worker MODE [options]`, one JSON line on stdout.

Modes:
  probe     time `samples` latency-sensitive requests (submit to completion, seen from the host), alone on
            this process's context (what a latency-sensitive request sees).
  hog       a saturating neighbour: back-to-back kernels that fill every SM, until `duration_s` ends or stdin
            closes; prints {"ready": true} once it runs.
  priority  both in one process: hogs on the lowest-priority stream, requests on the highest.
  alloc     allocate `chunk_mb` chunks up to `target_mb` (how much memory this client can take, e.g. under an
            MPS pinned-memory limit).
The request (`--subject`): `kernel`, opgate's spin kernel of `probe_us` on `probe_blocks` blocks; or `operator`,
one call of a user's implementation from an `opgate verify` spec file at its perf_dims (`--spec-file --op --impl
--dtype --seed`), registered by `opgate.verify.qos_worker` (run that module for it: it is this worker plus the
operator request). Both go through one timing path (`LatencyRequest`, `time_requests`).
Separate processes are separate CUDA contexts: the GPU time-slices between them, unless an MPS server runs them
as one.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

HOG_THREADS = 512
WARMUP_REQUESTS = 10


@dataclass
class LatencyRequest:
    """One latency-sensitive request: `submit` enqueues it on its own stream, `wait` blocks until that stream is
    done. `facts` describe it (sizes, the stream's real priority) for the result."""

    submit: Callable[[], None]
    wait: Callable[[], None]
    facts: dict[str, Any] = field(default_factory=dict)
    keep_alive: tuple[Any, ...] = ()  # what the stream depends on (a wrapped CuPy stream), held as long as this

    def time_once_us(self) -> float:
        start = time.perf_counter()
        self.submit()
        self.wait()
        return (time.perf_counter() - start) * 1e6


def _setup(device: int) -> tuple[Any, Any]:
    from opgate.gpu.probes import kernels
    from opgate.gpu.probes.device import import_cupy

    cupy = import_cupy()
    cupy.cuda.Device(device).use()
    return cupy, kernels


def kernel_request(args: argparse.Namespace, priority: int | None) -> LatencyRequest:
    """opgate's spin kernel: `probe_us` of busy time on `probe_blocks` blocks, on a CuPy stream."""
    import numpy as np

    cupy, kernels = _setup(args.device)
    spin = kernels.kernel("opgate_spin")
    done = cupy.zeros(1, dtype=cupy.uint32)
    stream = (cupy.cuda.Stream(non_blocking=True) if priority is None
              else cupy.cuda.Stream(non_blocking=True, priority=priority))
    ns = np.uint64(int(args.probe_us * 1e3))

    def submit() -> None:
        with stream:
            spin((args.probe_blocks,), (128,), (ns, done))

    return LatencyRequest(submit, stream.synchronize,
                          {"subject": "kernel", "probe_us": args.probe_us, "probe_blocks": args.probe_blocks,
                           "stream_priority": priority})  # None: the default priority


RequestFactory = Callable[[argparse.Namespace, "int | None"], LatencyRequest]
REQUESTS: dict[str, RequestFactory] = {"kernel": kernel_request}


def register_request(subject: str, factory: RequestFactory) -> None:
    """Add a `--subject` this worker can time; `opgate.verify.qos_worker` adds `operator` (it needs verify's
    implementation loader, which a probe does not import)."""
    REQUESTS[subject] = factory


def make_request(args: argparse.Namespace, priority: int | None = None) -> LatencyRequest:
    factory = REQUESTS.get(args.subject)
    if factory is None:
        raise RuntimeError(f"this worker has no {args.subject!r} request: operator requests run under "
                           "`python -m opgate.verify.qos_worker`")
    return factory(args, priority)


def time_requests(request: LatencyRequest, samples: int, gap_ms: float,
                  under_load: Callable[[], bool] = lambda: True) -> list[float]:
    """Up to `samples` latencies of `request`, a gap between them, while `under_load()` holds (the caller refills
    its load and calls again for the rest)."""
    values: list[float] = []
    while len(values) < samples and under_load():
        values.append(request.time_once_us())
        time.sleep(gap_ms / 1e3)
    return values


def warm_up(request: LatencyRequest) -> None:
    """First calls compile (Triton) and fill the allocator's caches; they are not samples."""
    for _ in range(WARMUP_REQUESTS):
        request.time_once_us()


def _hog_grid(cupy: Any, device: int, waves: int) -> tuple[int]:
    attrs = cupy.cuda.Device(device).attributes
    per_sm = max(1, attrs["MaxThreadsPerMultiProcessor"] // HOG_THREADS)
    return (attrs["MultiProcessorCount"] * per_sm * waves,)


def run_probe(args: argparse.Namespace) -> dict[str, Any]:
    request = make_request(args)
    warm_up(request)
    return {"latencies_us": time_requests(request, args.samples, args.gap_ms), "request": request.facts}


def run_hog(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    cupy, kernels = _setup(args.device)
    spin = kernels.kernel("opgate_spin")
    done = cupy.zeros(1, dtype=cupy.uint32)
    stream = cupy.cuda.Stream(non_blocking=True)
    grid = _hog_grid(cupy, args.device, args.waves)
    ns = np.uint64(int(args.hog_block_us * 1e3))
    with stream:
        spin(grid, (HOG_THREADS,), (ns, done))
    stream.synchronize()
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    print(json.dumps({"ready": True}), flush=True)
    started = time.perf_counter()
    kernels_run = 0
    while not stop.is_set() and time.perf_counter() - started < args.duration_s:
        with stream:
            for _ in range(4):
                spin(grid, (HOG_THREADS,), (ns, done))
        stream.synchronize()
        kernels_run += 4
    return {"hog_kernels": kernels_run, "seconds": time.perf_counter() - started}


def run_priority(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from opgate.gpu.probes.priority import stream_priority_range

    cupy, kernels = _setup(args.device)
    least, greatest, _ = stream_priority_range(cupy)
    request = make_request(args, priority=greatest)
    spin = kernels.kernel("opgate_spin")
    done = cupy.zeros(1, dtype=cupy.uint32)
    low = cupy.cuda.Stream(non_blocking=True, priority=least)
    grid = _hog_grid(cupy, args.device, args.waves)
    hog_ns = np.uint64(int(args.hog_block_us * 1e3))
    warm_up(request)
    values: list[float] = []
    refills = 0
    while len(values) < args.samples:
        with low:
            for _ in range(8):
                spin(grid, (HOG_THREADS,), (hog_ns, done))
        hog_done = cupy.cuda.Event()
        hog_done.record(low)
        refills += 1
        time.sleep(0.002)  # let the hogs take every SM
        values += time_requests(request, args.samples - len(values), args.gap_ms, lambda: not hog_done.done)
        low.synchronize()
    return {"latencies_us": values, "priority_range": [int(least), int(greatest)], "refills": refills,
            "request": request.facts}


def run_alloc(args: argparse.Namespace) -> dict[str, Any]:
    cupy, _ = _setup(args.device)
    chunks = []
    error = ""
    chunk = args.chunk_mb * 1024 * 1024
    while len(chunks) * args.chunk_mb < args.target_mb:
        try:
            chunks.append(cupy.cuda.runtime.malloc(chunk))
        except Exception as exc:  # the limit, as the client sees it
            error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            break
    allocated = len(chunks) * args.chunk_mb
    for pointer in chunks:
        cupy.cuda.runtime.free(pointer)
    return {"allocated_mb": allocated, "error": error}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opgate.gpu.probes.qos_worker")
    parser.add_argument("mode", choices=["probe", "hog", "priority", "alloc"])
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--probe-us", type=float, default=50.0)
    parser.add_argument("--probe-blocks", type=int, default=8)
    parser.add_argument("--gap-ms", type=float, default=0.5)
    parser.add_argument("--hog-block-us", type=float, default=200.0)
    parser.add_argument("--waves", type=int, default=10)
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--subject", choices=["kernel", "operator"], default="kernel")
    parser.add_argument("--spec-file", default="")
    parser.add_argument("--op", default="")
    parser.add_argument("--impl", default="")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk-mb", type=int, default=256)
    parser.add_argument("--target-mb", type=int, default=4096)
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = {"probe": run_probe, "hog": run_hog, "priority": run_priority, "alloc": run_alloc}[args.mode](args)
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}), flush=True)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
