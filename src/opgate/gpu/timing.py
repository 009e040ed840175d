"""Timing on the GPU with CUDA events: warm up, then many repetitions, summarised by median."""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from opgate.gpu.stats import Samples


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


def time_torch_events(torch: Any, action: Callable[[], None], warmup: int, reps: int) -> Samples:
    """The same for PyTorch's own work: milliseconds per call of `action` (which enqueues GPU work on the
    current device's current stream), timed by torch.cuda events back to back."""
    if reps < 1:
        raise ValueError("reps must be >= 1")
    stream = torch.cuda.current_stream()
    for _ in range(warmup):
        action()
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in pairs:
        start.record(stream)
        action()
        end.record(stream)
    torch.cuda.synchronize()
    return Samples.of([start.elapsed_time(end) for start, end in pairs])


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
