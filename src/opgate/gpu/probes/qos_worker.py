"""Child process of the QoS probe: `python -m opgate.gpu.probes.qos_worker MODE [options]`, one JSON line on stdout.

Modes:
  probe     time `samples` launches of the probe kernel (submit to completion, seen from the host), alone on
            this process's context (what a latency-sensitive request sees).
  hog       a saturating neighbour: back-to-back kernels that fill every SM, until `duration_s` ends or stdin
            closes; prints {"ready": true} once it runs.
  priority  both in one process: hogs on the lowest-priority stream, probes on the highest.
  alloc     allocate `chunk_mb` chunks up to `target_mb` (how much memory this client can take, e.g. under an
            MPS pinned-memory limit).
Separate processes are separate CUDA contexts: the GPU time-slices between them, unless an MPS server runs them
as one.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

HOG_THREADS = 512


def _setup(device: int) -> tuple[Any, Any]:
    from opgate.gpu.probes import kernels
    from opgate.gpu.probes.device import import_cupy

    cupy = import_cupy()
    cupy.cuda.Device(device).use()
    return cupy, kernels


def _probe_once(cupy: Any, spin: Any, stream: Any, blocks: int, ns: Any, done: Any) -> float:
    start = time.perf_counter()
    with stream:
        spin((blocks,), (128,), (ns, done))
    stream.synchronize()
    return (time.perf_counter() - start) * 1e6


def _hog_grid(cupy: Any, device: int, waves: int) -> tuple[int]:
    attrs = cupy.cuda.Device(device).attributes
    per_sm = max(1, attrs["MaxThreadsPerMultiProcessor"] // HOG_THREADS)
    return (attrs["MultiProcessorCount"] * per_sm * waves,)


def run_probe(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    cupy, kernels = _setup(args.device)
    spin = kernels.kernel("opgate_spin")
    done = cupy.zeros(1, dtype=cupy.uint32)
    stream = cupy.cuda.Stream(non_blocking=True)
    ns = np.uint64(int(args.probe_us * 1e3))
    for _ in range(10):
        _probe_once(cupy, spin, stream, args.probe_blocks, ns, done)
    values = []
    for _ in range(args.samples):
        values.append(_probe_once(cupy, spin, stream, args.probe_blocks, ns, done))
        time.sleep(args.gap_ms / 1e3)
    return {"latencies_us": values}


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
    spin = kernels.kernel("opgate_spin")
    done = cupy.zeros(1, dtype=cupy.uint32)
    low = cupy.cuda.Stream(non_blocking=True, priority=least)
    high = cupy.cuda.Stream(non_blocking=True, priority=greatest)
    grid = _hog_grid(cupy, args.device, args.waves)
    hog_ns = np.uint64(int(args.hog_block_us * 1e3))
    probe_ns = np.uint64(int(args.probe_us * 1e3))
    for _ in range(10):
        _probe_once(cupy, spin, high, args.probe_blocks, probe_ns, done)
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
        while not hog_done.done and len(values) < args.samples:
            values.append(_probe_once(cupy, spin, high, args.probe_blocks, probe_ns, done))
            time.sleep(args.gap_ms / 1e3)
        low.synchronize()
    return {"latencies_us": values, "priority_range": [int(least), int(greatest)], "refills": refills}


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


def main(argv: list[str]) -> int:
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
    parser.add_argument("--chunk-mb", type=int, default=256)
    parser.add_argument("--target-mb", type=int, default=4096)
    args = parser.parse_args(argv)
    try:
        result = {"probe": run_probe, "hog": run_hog, "priority": run_priority, "alloc": run_alloc}[args.mode](args)
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}), flush=True)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
