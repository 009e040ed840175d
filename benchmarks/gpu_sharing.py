"""What other processes on the host cost a calibration's bound terms: the same synchronised float64 reductions (the
shape of error_bounds.RowTerms.of on a 4.2 M-element gradient: count_nonzero, L1 norm, sum and dot, each read back to
Python) timed alone, beside processes that keep the GPU busy (time-slicing: without MPS the kernels of different
processes never overlap), and beside processes that stream host memory (as the library's CPU work does). Then, on a
GPU, a whole accumulation bound (error_bounds.accumulation_bounds on a softmax(x @ w) with a 1 M-element w) both ways:
each sample's figures read back as they are formed (the CPU's way, as the GPU did before) and all samples' figures
read back once (error_bounds._sampled_terms_on_device), alone and beside the same busy processes.

    python3 benchmarks/gpu_sharing.py [--elements 4194304] [--reps 60] [--others 4,12] [--json out.json]
    python3 benchmarks/gpu_sharing.py --hold 4 &   # only keep the GPU busy with 4 processes, until killed

Prints one row per (where the reductions run, what runs beside them): seconds per RowTerms-like step and the ratio to
the same step alone; then seconds per accumulation bound. Needs a CUDA GPU for the GPU rows; the CPU rows run anywhere.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import signal
import time
from pathlib import Path


def _keep_gpu_busy(stop: "mp.synchronize.Event", ready: "mp.synchronize.Event", elements: int) -> None:
    """A check worker's pattern: kernels of a few milliseconds, synchronised now and then."""
    import torch

    a = torch.randn(2048, 2048, device="cuda")
    v = torch.randn(elements, device="cuda")
    while not stop.is_set():
        for _ in range(8):
            a = (a @ a).tanh_()
            v.mul_(1.0000001)
        torch.cuda.synchronize()
        ready.set()


def _stream_host_memory(stop: "mp.synchronize.Event", ready: "mp.synchronize.Event", elements: int) -> None:
    """A calibration's CPU pattern: float64 elementwise passes over tensors larger than any cache."""
    import torch

    torch.set_num_threads(1)
    x = torch.randn(elements, dtype=torch.float64)
    y = torch.empty_like(x)
    while not stop.is_set():
        torch.mul(x, 1.0000001, out=y)
        x, y = y, x
        ready.set()


def _row_terms_step(part: "object") -> None:
    import torch

    int(torch.count_nonzero(part))
    float(torch.linalg.vector_norm(part, 1))
    float(part.sum())
    float(torch.dot(part, part))


def _timed(device: str, elements: int, reps: int) -> float:
    import torch

    torch.set_num_threads(1)  # as the library's calibration processes run
    part = torch.randn(elements, dtype=torch.float64, device=device)
    for _ in range(3):
        _row_terms_step(part)
    began = time.perf_counter()
    for _ in range(reps):
        _row_terms_step(part)
    return (time.perf_counter() - began) / reps


def _bound_seconds(way: str) -> float:
    """One accumulation bound on the GPU, its sampled terms read back per sample or once."""
    import torch

    from opgate.verify import error_bounds

    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(256, 1024, dtype=torch.float64, device="cuda", generator=gen)
    w = torch.randn(1024, 1024, dtype=torch.float64, device="cuda", generator=gen) / 32

    def reference(a: "torch.Tensor", b: "torch.Tensor") -> "torch.Tensor":
        return torch.softmax(a @ b, -1)

    truth = [reference(x, w)]
    terms = {"per sample": error_bounds._sampled_terms_per_sample, "once": error_bounds._sampled_terms_on_device}
    original = error_bounds._sampled_terms
    error_bounds._sampled_terms = terms[way]
    try:
        error_bounds.accumulation_bounds(reference, [x, w], truth, "float32", seed=1)  # warm
        torch.cuda.synchronize()
        began = time.perf_counter()
        error_bounds.accumulation_bounds(reference, [x, w], truth, "float32", seed=2)
        return time.perf_counter() - began
    finally:
        error_bounds._sampled_terms = original


def _measure(device: str, beside: str, others: int, elements: int, reps: int, bound_way: str = "") -> float:
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    target = _keep_gpu_busy if beside == "GPU work" else _stream_host_memory
    readies = [ctx.Event() for _ in range(others if beside else 0)]
    procs = [ctx.Process(target=target, args=(stop, ready, elements), daemon=True) for ready in readies]
    for p in procs:
        p.start()
    for ready in readies:  # every neighbour has made its context and is running
        ready.wait(120)
    try:
        return _bound_seconds(bound_way) if bound_way else _timed(device, elements, reps)
    finally:
        stop.set()
        for p in procs:
            p.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=4_194_304)
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--others", default="4,12")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--hold", type=int, default=0, help="only keep the GPU busy with this many processes")
    args = parser.parse_args()
    if args.hold:
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        readies = [ctx.Event() for _ in range(args.hold)]
        procs = [ctx.Process(target=_keep_gpu_busy, args=(stop, ready, args.elements)) for ready in readies]
        signal.signal(signal.SIGTERM, lambda *_: stop.set())  # the neighbours stop with it
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        return
    import torch

    counts = [int(c) for c in args.others.split(",") if c]
    devices = ["cuda", "cpu"] if torch.cuda.is_available() else ["cpu"]
    rows = []
    for device in devices:
        alone = _measure(device, "", 0, args.elements, args.reps)
        rows.append({"device": device, "beside": "nothing", "others": 0, "s_per_step": alone, "ratio": 1.0})
        for beside in (["GPU work"] if device == "cuda" else []) + ["host memory streams"]:
            for n in counts:
                seconds = _measure(device, beside, n, args.elements, args.reps)
                rows.append({"device": device, "beside": beside, "others": n, "s_per_step": seconds,
                             "ratio": seconds / alone})
    print(f"{'reductions on':<14}{'beside':<22}{'processes':>10}{'ms per step':>14}{'x alone':>10}")
    for r in rows:
        print(f"{r['device']:<14}{r['beside']:<22}{r['others']:>10}{1e3 * r['s_per_step']:>14.2f}{r['ratio']:>10.1f}")
    bounds = []
    if torch.cuda.is_available():
        for n in [0] + counts[:1]:
            for way in ("per sample", "once"):
                seconds = _measure("cuda", "GPU work" if n else "", n, args.elements, args.reps, bound_way=way)
                bounds.append({"read back": way, "busy processes beside": n, "seconds": seconds})
        print(f"\n{'accumulation bound, read back':<32}{'busy processes beside':>22}{'seconds':>10}")
        for b in bounds:
            print(f"{b['read back']:<32}{b['busy processes beside']:>22}{b['seconds']:>10.2f}")
    if args.json:
        args.json.write_text(json.dumps({"elements": args.elements, "reps": args.reps, "rows": rows,
                                         "accumulation_bound": bounds}, indent=1))


if __name__ == "__main__":
    main()
