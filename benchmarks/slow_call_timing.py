"""The runtime check's timing of a slow call (gpu/probes/timing.py time_cuda), two ways in one run, GPU only.

A library run's serial end times each operator alone on the GPU. A call of 0.1 s or more is timed within a 2 s budget
(calls_within). After its untimed first call and the timed estimate, the way before 0a4720a (`before`) ran up to
three warm-ups whenever they fit the whole budget and then the timed calls; now (`now`) the warm-ups take at most a
quarter of the budget, and where none is left the estimate is kept as the first timed call. Both are run here on the
same calls, interleaved, and the table gives each way's wall seconds, calls and median against the call's length.

The call is torch.cuda._sleep of a measured number of cycles, so its length is known and the same in both ways.

    PYTHONPATH=src python3 benchmarks/slow_call_timing.py [--lengths 0.05,0.1,0.2,0.5] [--trials 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Callable

from opgate.gpu.probes import timing


def before_0a4720a(estimate_s: float, warmup: int, wanted: int, budget_s: float) -> timing.AfterEstimate:
    """The plan time_cuda followed before 0a4720a: the warm-ups left (warmup - 2) if they fit the whole budget, the
    timed calls within it, the estimate never a sample."""
    repeats = timing.calls_within(estimate_s, wanted, budget_s)
    left = max(0, warmup - 2)
    return timing.AfterEstimate(left if estimate_s * left <= budget_s else 0, repeats, False)


WAYS: dict[str, Callable[[float, int, int, float], timing.AfterEstimate]] = {
    "before": before_0a4720a, "now": timing.plan_after_estimate}


def cycles_per_second(torch: Any) -> float:
    """torch.cuda._sleep's cycles per second of GPU time, measured with events."""
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10**8)
    end.record()
    end.synchronize()
    return 10**8 / (start.elapsed_time(end) / 1e3)


def one_timing(torch: Any, way: str, cycles: int) -> tuple[float, int, float, int]:
    """(wall seconds of time_cuda, calls made, median ms, samples) with `way`'s plan after the estimate."""
    calls = [0]
    x = torch.ones(4, device="cuda")

    def slow(t: Any) -> Any:
        calls[0] += 1
        torch.cuda._sleep(cycles)
        return t * 2

    planned = timing.plan_after_estimate
    timing.plan_after_estimate = WAYS[way]
    try:
        begun = time.perf_counter()
        stats = timing.time_cuda(slow, [(x,), (x.clone(),)], warmup=5, repeats=50)  # as verify/runtime.py asks
        wall = time.perf_counter() - begun
    finally:
        timing.plan_after_estimate = planned
    return wall, calls[0], stats.median_us / 1e3, stats.samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="0.05,0.1,0.2,0.5", help="call lengths in seconds, comma-separated")
    parser.add_argument("--trials", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        lengths = [float(v) for v in args.lengths.split(",") if v.strip()]
    except ValueError:
        print(f"slow_call_timing.py: --lengths {args.lengths!r}: give seconds separated by commas, e.g. 0.1,0.5",
              file=sys.stderr)
        return 2
    if not lengths or any(v <= 0 for v in lengths) or args.trials < 1:
        print("slow_call_timing.py: --lengths must be positive seconds and --trials at least 1", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("slow_call_timing.py: no CUDA device: this benchmark times GPU calls", file=sys.stderr)
        return 3
    rate = cycles_per_second(torch)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, budget {timing.TIMED_CALLS_BUDGET_S} s, "
          f"{args.trials} trials a way, interleaved")
    print(f"{'call s':>7} {'way':>7} {'wall s':>7} {'calls':>6} {'samples':>8} {'median ms':>10}")
    for length in lengths:
        cycles = int(rate * length)
        rows: dict[str, list[tuple[float, int, float, int]]] = {way: [] for way in WAYS}
        for _ in range(args.trials):
            for way in WAYS:
                rows[way].append(one_timing(torch, way, cycles))
        for way, runs in rows.items():
            print(f"{length:7.3f} {way:>7} {statistics.median(r[0] for r in runs):7.2f} "
                  f"{statistics.median(r[1] for r in runs):6.0f} {statistics.median(r[3] for r in runs):8.0f} "
                  f"{statistics.median(r[2] for r in runs):10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
