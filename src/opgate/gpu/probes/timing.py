"""The one home of GPU event timing and its one summary type, `Samples` (median and spread, never a
single run).

Timers: `time_on_stream` / `time_interleaved` (CuPy events, the doctor's probes), `time_torch_events`
(torch events, the PyTorch equivalents), `time_host_ms` (host wall clock) and `time_cuda` (a user's
callable, L2 flushed and inputs rotated: verify's runtime stage). CuPy and torch are passed in or imported
inside the functions.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (q in 0..100), as numpy's default; ValueError on no values."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q} is outside 0..100")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = math.ceil(position)
    if low == high:
        return float(ordered[low])
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


@dataclass(frozen=True)
class Samples:
    """Repeated measurements of one quantity (e.g. milliseconds per copy) and their summary."""

    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError("Samples needs at least one value")
        if any(not math.isfinite(v) for v in self.values):
            raise ValueError(f"Samples got a non-finite value: {self.values}")

    @classmethod
    def of(cls, values: Sequence[float]) -> "Samples":
        return cls(tuple(float(v) for v in values))

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        return float(statistics.median(self.values))

    @property
    def p10(self) -> float:
        return percentile(self.values, 10)

    @property
    def p90(self) -> float:
        return percentile(self.values, 90)

    @property
    def p95(self) -> float:
        return percentile(self.values, 95)

    @property
    def minimum(self) -> float:
        return min(self.values)

    @property
    def maximum(self) -> float:
        return max(self.values)

    @property
    def relative_spread(self) -> float:
        """(p90 - p10) / median: how much one measurement of this quantity moves between runs."""
        median = self.median
        return (self.p90 - self.p10) / median if median else float("inf")

    def summary(self) -> dict[str, float]:
        return {"n": self.n, "median": self.median, "p10": self.p10, "p90": self.p90, "p95": self.p95,
                "min": self.minimum, "max": self.maximum}


def bandwidth_tbs(bytes_moved: float, milliseconds: float) -> float:
    """Bytes over milliseconds as TB/s (10^12 bytes per second)."""
    if milliseconds <= 0:
        raise ValueError(f"a transfer cannot take {milliseconds} ms; the timing is broken")
    return bytes_moved / (milliseconds * 1e-3) / 1e12


def bandwidth_gbs(bytes_moved: float, milliseconds: float) -> float:
    """Bytes over milliseconds as GB/s (10^9 bytes per second)."""
    return bandwidth_tbs(bytes_moved, milliseconds) * 1e3


def time_on_stream(cupy: Any, stream: Any, launch: Callable[[], None], warmup: int, reps: int) -> Samples:
    """Milliseconds per call of `launch` (which enqueues work on the current stream), timed by events
    recorded on `stream` around each call. Calls are enqueued back to back, so each interval holds that
    call's GPU time only. Any asynchronous CUDA error surfaces at the synchronize and is raised."""
    if reps < 1:
        raise ValueError("reps must be >= 1")
    with stream:
        for _ in range(warmup):
            launch()
    stream.synchronize()
    pairs = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(reps)]
    with stream:
        for start, end in pairs:
            start.record(stream)
            launch()
            end.record(stream)
    stream.synchronize()
    return Samples.of([cupy.cuda.get_elapsed_time(start, end) for start, end in pairs])


def time_torch_events(torch: Any, action: Callable[[], None], warmup: int, reps: int,
                      before_each: Callable[[], Any] | None = None, host_ms: list[float] | None = None) -> Samples:
    """The same for PyTorch's own work: milliseconds per call of `action` (which enqueues GPU work on the
    current device's current stream), timed by torch.cuda events back to back. `before_each` (e.g. an L2
    flush) is enqueued before every timed call, outside its events. `host_ms`, when given, gets the host's
    milliseconds in each timed `action()`: how long the host takes to submit a call while the GPU runs behind."""
    if reps < 1:
        raise ValueError("reps must be >= 1")
    stream = torch.cuda.current_stream()
    for _ in range(warmup):
        action()
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in pairs:
        if before_each is not None:
            before_each()
        start.record(stream)
        submitted = time.perf_counter()
        action()
        if host_ms is not None:
            host_ms.append((time.perf_counter() - submitted) * 1e3)
        end.record(stream)
    torch.cuda.synchronize()
    return Samples.of([start.elapsed_time(end) for start, end in pairs])


def time_torch_batches(torch: Any, run: Callable[[], Any], calls: int, batches: int = 5) -> Samples:
    """Microseconds per call of `run`, from one torch event pair around `calls` back-to-back calls, `batches`
    times: for calls too short to time one by one (a graph replay against its eager calls)."""
    samples = []
    for _ in range(batches):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / calls)
    return Samples.of(samples)


def time_interleaved(cupy: Any, stream: Any, launches: Sequence[Callable[[], None]], warmup: int,
                     reps: int) -> list[Samples]:
    """Time several variants alternately (A B C A B C ...), so clock or thermal drift during the run
    spreads over all of them instead of favouring whichever ran first."""
    with stream:
        for _ in range(warmup):
            for launch in launches:
                launch()
    stream.synchronize()
    pairs = [[(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(reps)] for _ in launches]
    with stream:
        for rep in range(reps):
            for which, launch in enumerate(launches):
                start, end = pairs[which][rep]
                start.record(stream)
                launch()
                end.record(stream)
    stream.synchronize()
    return [Samples.of([cupy.cuda.get_elapsed_time(s, e) for s, e in variant]) for variant in pairs]


def time_host_ms(action: Callable[[], None], warmup: int, reps: int) -> Samples:
    """Host wall-clock milliseconds of `action`, which must synchronize before it returns."""
    for _ in range(warmup):
        action()
    values = []
    for _ in range(reps):
        start = time.perf_counter()
        action()
        values.append((time.perf_counter() - start) * 1e3)
    return Samples.of(values)


@dataclass(frozen=True)
class TimedCalls:
    """A user callable timed by `time_cuda`: microseconds per call, and how the calls were made."""

    us: Samples
    l2_flushed: bool
    input_sets: int
    # wall seconds of the first, untimed call (compiles, autotuning, a cold kernel load), None where none was made
    first_call_s: float | None = None
    # the median host time to submit a timed call (the host runs ahead of the GPU; None: not recorded)
    host_submit_us: float | None = None

    @property
    def median_us(self) -> float:
        return self.us.median

    @property
    def p95_us(self) -> float:
        return self.us.p95

    @property
    def min_us(self) -> float:
        return self.us.minimum

    @property
    def samples(self) -> int:
        return self.us.n

    def to_dict(self) -> dict[str, Any]:
        return {"median_us": self.median_us, "p95_us": self.p95_us, "min_us": self.min_us, "samples": self.samples,
                "l2_flushed": self.l2_flushed, "input_sets": self.input_sets, "first_call_s": self.first_call_s,
                "host_submit_us": self.host_submit_us}


def l2_bytes(device: int = 0) -> int:
    import torch

    props = torch.cuda.get_device_properties(device)
    return int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)


# The timed calls of one measurement take about this long at most: fla's fused linear cross-entropy in float32 at a
# Llama-3 vocabulary (M=8192, H=4096, V=128256) ran past 110 s of one runtime check on the H100 (fortieth session),
# its 55 timed calls and the graph check's ~200 at about a second each, while the GPU was the run's alone.
TIMED_CALLS_BUDGET_S = 2.0
# Never fewer timed calls than this: a median of 5 is still a median (p95 is then about the largest).
FEWEST_TIMED_CALLS = 5


def calls_within(seconds_per_call: float, wanted: int, budget_s: float = TIMED_CALLS_BUDGET_S,
                 fewest: int = FEWEST_TIMED_CALLS) -> int:
    """How many of `wanted` calls of `seconds_per_call` each fit `budget_s`, never fewer than `fewest` (nor more
    than wanted)."""
    if seconds_per_call <= 0 or not math.isfinite(seconds_per_call):
        return wanted
    return max(min(fewest, wanted), min(wanted, int(budget_s / seconds_per_call)))


def time_cuda(fn: Callable[..., Any], input_sets: Sequence[tuple], warmup: int = 5, repeats: int = 50,
              flush_l2: bool = True, budget_s: float | None = TIMED_CALLS_BUDGET_S) -> TimedCalls:
    """`fn(*input_sets[i % n])` timed the way a kernel engineer would: torch events around the call only,
    warm-up first, L2 flushed before every timed call (so every call starts from HBM), inputs rotated.
    `budget_s`: a call so slow that `repeats` of them would take longer is timed fewer times (calls_within), and
    warmed up once; the first warm-up call (compiles, autotuning) is never timed, the second is timed alone for
    the estimate."""
    import itertools

    import torch

    if not input_sets:
        raise ValueError("time_cuda needs at least one input set")
    flush = torch.empty(2 * l2_bytes(), dtype=torch.int8, device="cuda") if flush_l2 else None
    calls = itertools.count()

    def call() -> None:
        fn(*input_sets[next(calls) % len(input_sets)])

    before = (lambda: flush.zero_()) if flush is not None else None
    first_call_s = None
    kept: tuple[float, ...] = ()
    if budget_s is not None and warmup >= 2:
        begun = time.perf_counter()
        call()  # compiles and autotunes: not a sample of the call's own time
        torch.cuda.synchronize()
        first_call_s = round(time.perf_counter() - begun, 3)
        estimate = time_torch_events(torch, call, 0, 1, before_each=before)
        plan = plan_after_estimate(estimate.median / 1e3, warmup, repeats, budget_s)
        warmup, repeats = plan.warmup, plan.repeats
        kept = estimate.values if plan.estimate_is_sample else ()
    host_ms: list[float] = []
    ms = time_torch_events(torch, call, warmup, repeats, before_each=before, host_ms=host_ms)
    return TimedCalls(Samples.of([v * 1000.0 for v in kept + ms.values]), flush is not None, len(input_sets),
                      first_call_s, host_submit_us=statistics.median(host_ms) * 1000.0)


# The warm-up calls after the estimate take at most this share of the timing budget: the first call compiled and
# autotuned and the estimate ran, so more warm-ups of a slow call only cost time (fla's fused linear cross-entropy
# at 0.2 s a call took three, 0.6 s, in each of its runtime checks at a library run's serial end).
WARM_UP_BUDGET_SHARE = 0.25


@dataclass(frozen=True)
class AfterEstimate:
    """What time_cuda does after its untimed first call and the timed estimate: `warmup` more calls, `repeats` timed
    ones, and whether the estimate is kept as one of the samples (no warm-up comes between them: it was timed as
    they are, L2 flushed, events around the call alone)."""

    warmup: int
    repeats: int
    estimate_is_sample: bool


def plan_after_estimate(estimate_s: float, warmup: int, wanted: int, budget_s: float) -> AfterEstimate:
    """The calls left once one call took `estimate_s` (time_cuda asked for `warmup` warm-ups in all, the first call
    and the estimate among them, and `wanted` timed calls): the timed calls within `budget_s` (calls_within), the
    warm-ups within WARM_UP_BUDGET_SHARE of it; where no warm-up is left and the budget binds, the estimate counts
    as the first timed call."""
    repeats = calls_within(estimate_s, wanted, budget_s)
    left = max(0, warmup - 2)
    warmups = left if estimate_s * left <= WARM_UP_BUDGET_SHARE * budget_s else 0
    if warmups == 0 and repeats < wanted and repeats > 1:
        return AfterEstimate(0, repeats - 1, True)
    return AfterEstimate(warmups, repeats, False)
