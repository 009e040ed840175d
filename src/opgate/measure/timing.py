"""Time a GPU callable the way a kernel engineer would: CUDA events around the call only, warm-up first,
L2 flushed before every timed call, inputs rotated across several buffers, median and p95 reported.

Imports torch lazily; callers run this in a child process on a GPU host.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence


@dataclass(frozen=True)
class TimingStats:
    median_us: float
    p95_us: float
    min_us: float
    samples: int
    l2_flushed: bool
    input_sets: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]) of a non-empty sequence."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def l2_bytes(device: int = 0) -> int:
    import torch

    props = torch.cuda.get_device_properties(device)
    return int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)


def time_cuda(
    fn: Callable[..., Any],
    input_sets: Sequence[tuple],
    warmup: int = 5,
    repeats: int = 50,
    flush_l2: bool = True,
) -> TimingStats:
    """Median and p95 of `fn(*input_sets[i % n])` in microseconds, one CUDA event pair per call."""
    import torch

    if not input_sets:
        raise ValueError("time_cuda needs at least one input set")
    flush = torch.empty(2 * l2_bytes(), dtype=torch.int8, device="cuda") if flush_l2 else None
    for i in range(warmup):
        fn(*input_sets[i % len(input_sets)])
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for i in range(repeats):
        if flush is not None:
            flush.zero_()  # evicts the previous call's lines: every call starts from HBM
        starts[i].record()
        fn(*input_sets[i % len(input_sets)])
        ends[i].record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends)]
    return TimingStats(
        median_us=statistics.median(times),
        p95_us=percentile(times, 95),
        min_us=min(times),
        samples=len(times),
        l2_flushed=flush is not None,
        input_sets=len(input_sets),
    )
