"""Stream priority: does a short kernel on the highest-priority stream get through a saturated GPU faster
than the same kernel on a stream of equal priority?

Low-priority streams keep every SM full with "hog" kernels made of many short blocks (20 us each, many
waves), so the block scheduler always has pending low-priority blocks to choose from; priority decides
who gets the next free slot (priorities do not preempt running blocks, per the CUDA documentation).
A probe kernel's latency is the event interval around it on its own stream. A sample counts only when
the hog queue was still running when the probe was submitted; the queue is refilled as needed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from opgate.gpu.probes import kernels
from opgate.gpu.probes.device import DeviceInfo, ProbeError, device_info, require_gpu
from opgate.gpu.probes.timing import Samples

HOG_THREADS = 512


@dataclass(frozen=True)
class StreamPriorityMeasurement:
    device: DeviceInfo
    least_priority: int
    greatest_priority: int
    range_source: str
    idle_us: Samples | None  # probe latency on an idle GPU (baseline)
    high_us: Samples | None  # probe on the highest-priority stream, GPU saturated by low-priority work
    equal_us: Samples | None  # probe on a stream of the hogs' own priority, GPU saturated
    hog_kernel_ms: float  # one hog kernel alone
    refills: int
    duration_s: float

    @property
    def supported(self) -> bool:
        return self.least_priority != self.greatest_priority

    @property
    def high_over_equal(self) -> float:
        if self.high_us is None or self.equal_us is None:
            raise ValueError("no saturated measurement was taken")
        return self.high_us.median / self.equal_us.median

    def to_dict(self) -> dict[str, Any]:
        def summary(s: Samples | None) -> dict[str, float] | None:
            return s.summary() if s else None

        return {"device": self.device.to_dict(), "least_priority": self.least_priority,
                "greatest_priority": self.greatest_priority, "range_source": self.range_source,
                "idle_us": summary(self.idle_us), "high_us": summary(self.high_us),
                "equal_us": summary(self.equal_us), "hog_kernel_ms": self.hog_kernel_ms,
                "refills": self.refills, "duration_s": self.duration_s}


def stream_priority_range(cupy: Any) -> tuple[int, int, str]:
    """(least, greatest) priority of the current device: cudaDeviceGetStreamPriorityRange through
    cuda-bindings, else read back from streams created outside the range (the runtime clamps them)."""
    try:
        from cuda.bindings import runtime as cudart

        err, least, greatest = cudart.cudaDeviceGetStreamPriorityRange()
        if err == cudart.cudaError_t.cudaSuccess:
            return int(least), int(greatest), "cudaDeviceGetStreamPriorityRange (cuda-bindings)"
    except Exception:  # cuda-bindings missing or too old: the clamping below gives the same two numbers
        pass
    least = cupy.cuda.Stream(non_blocking=True, priority=1 << 20).priority
    greatest = cupy.cuda.Stream(non_blocking=True, priority=-(1 << 20)).priority
    return int(least), int(greatest), "clamped stream priorities (cudaStreamGetPriority)"


def measure_stream_priority(device: int = 0, samples: int = 15, hog_block_us: float = 20.0, waves: int = 50,
                            hog_kernels_per_stream: int = 20, low_streams: int = 2) -> StreamPriorityMeasurement:
    import numpy as np

    started = time.perf_counter()
    cupy = require_gpu()
    info = device_info(device)
    with cupy.cuda.Device(device):
        least, greatest, range_source = stream_priority_range(cupy)
        if least == greatest:
            return StreamPriorityMeasurement(info, least, greatest, range_source, None, None, None, 0.0, 0,
                                             time.perf_counter() - started)
        low = [cupy.cuda.Stream(non_blocking=True, priority=least) for _ in range(low_streams)]
        high = cupy.cuda.Stream(non_blocking=True, priority=greatest)
        equal = cupy.cuda.Stream(non_blocking=True, priority=least)
        if high.priority != greatest or equal.priority != least:
            raise ProbeError(f"streams did not get the priorities asked for: high {high.priority} "
                             f"(wanted {greatest}), equal {equal.priority} (wanted {least})")
        spin = kernels.kernel("opgate_spin")
        tiny = kernels.kernel("opgate_tiny")
        done = cupy.zeros(1, dtype=cupy.uint32)
        counter = cupy.zeros(1, dtype=cupy.uint32)
        cupy.cuda.Device(device).synchronize()
        blocks_per_wave = info.sm_count * max(1, info.max_threads_per_sm // HOG_THREADS)
        hog_grid = (blocks_per_wave * waves,)
        hog_ns = np.uint64(int(hog_block_us * 1e3))
        expected_blocks = 0

        def probe(stream: Any) -> float:
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            with stream:
                tiny((1,), (32,), (counter,))
            end.record(stream)
            end.synchronize()
            return cupy.cuda.get_elapsed_time(start, end) * 1e3

        # Warm-up on every stream (module load, first-launch costs), then one hog alone for its duration.
        for stream in (*low, high, equal):
            probe(stream)
        t_start, t_end = cupy.cuda.Event(), cupy.cuda.Event()
        t_start.record(low[0])
        with low[0]:
            spin(hog_grid, (HOG_THREADS,), (hog_ns, done))
        t_end.record(low[0])
        t_end.synchronize()
        expected_blocks += hog_grid[0]
        hog_kernel_ms = cupy.cuda.get_elapsed_time(t_start, t_end)

        idle = [probe(high) for _ in range(10)]

        refills = 0
        hog_done: list[Any] = []

        def saturate() -> None:
            nonlocal refills, expected_blocks
            hog_done.clear()
            for stream in low:
                with stream:
                    for _ in range(hog_kernels_per_stream):
                        spin(hog_grid, (HOG_THREADS,), (hog_ns, done))
                event = cupy.cuda.Event()
                event.record(stream)
                hog_done.append(event)
            expected_blocks += hog_grid[0] * hog_kernels_per_stream * len(low)
            refills += 1
            time.sleep(0.002)  # let the hogs take every SM

        def saturated_samples(stream: Any) -> list[float]:
            values: list[float] = []
            saturate()
            first_refill = refills
            while len(values) < samples:
                if all(event.done for event in hog_done):
                    if refills - first_refill > 4 * samples:
                        raise ProbeError("the low-priority hog kernels kept finishing before a probe could be "
                                         "submitted: the GPU could not be kept saturated")
                    saturate()
                    continue
                values.append(probe(stream))
                time.sleep(0.0003)
            for low_stream in low:
                low_stream.synchronize()
            return values

        equal_us = saturated_samples(equal)
        high_us = saturated_samples(high)
        cupy.cuda.Device(device).synchronize()
        ran = int(cupy.asnumpy(done)[0])
        if ran != expected_blocks:
            raise ProbeError(f"{ran} hog blocks reported done, {expected_blocks} were launched")
    return StreamPriorityMeasurement(info, least, greatest, range_source, Samples.of(idle), Samples.of(high_us),
                                     Samples.of(equal_us), hog_kernel_ms, refills, time.perf_counter() - started)
