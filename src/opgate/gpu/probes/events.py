"""Stream-ordered async work and event polling: how fine events time (the step their timestamps move in,
and what recording events back to back costs), how fast a launch is seen done,
whether launches are asynchronous and ordered, and how deep the launch queue is before the host blocks."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from opgate.gpu.probes import kernels
from opgate.gpu.probes.device import DeviceInfo, ProbeError, device_info, require_gpu
from opgate.gpu.probes.timing import Samples


@dataclass(frozen=True)
class EventTiming:
    device: DeviceInfo
    back_to_back_us: Samples  # intervals between events recorded back to back with no work between
    smallest_step_us: float  # the smallest non-zero such interval: the front end's cost of one event record
    zero_intervals: int
    timer_step_us: float | None  # the finest step event timestamps move in (None: too few distinct readings)
    timer_step_readings: int  # distinct event-timed durations the step was found from
    spin_requested_us: float
    spin_event_us: Samples  # a kernel that waits spin_requested_us of %globaltimer, timed by events
    roundtrip_us: Samples  # host: launch a tiny kernel + record, poll the event until done
    launch_call_us: float  # host time of one launch call while the GPU is busy
    launch_returned_before_done: bool  # the launch call came back while its kernel still ran
    queue_depth_before_block: int | None  # launches accepted before a call blocked (None: never blocked)
    queue_probe_launches: int
    chain_steps: int
    chain_ok: bool  # a chain of dependent kernels on one stream produced the in-order result
    duration_s: float

    @property
    def spin_error_fraction(self) -> float:
        return abs(self.spin_event_us.median - self.spin_requested_us) / self.spin_requested_us

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device.to_dict(), "back_to_back_us": self.back_to_back_us.summary(),
                "smallest_step_us": self.smallest_step_us, "zero_intervals": self.zero_intervals,
                "timer_step_us": self.timer_step_us, "timer_step_readings": self.timer_step_readings,
                "spin_requested_us": self.spin_requested_us, "spin_event_us": self.spin_event_us.summary(),
                "spin_error_fraction": self.spin_error_fraction, "roundtrip_us": self.roundtrip_us.summary(),
                "launch_call_us": self.launch_call_us,
                "launch_returned_before_done": self.launch_returned_before_done,
                "queue_depth_before_block": self.queue_depth_before_block,
                "queue_probe_launches": self.queue_probe_launches, "chain_steps": self.chain_steps,
                "chain_ok": self.chain_ok, "duration_s": self.duration_s}


def timer_step_waits_ns(fine_readings: int = 200) -> list[int]:
    """Kernel waits that find a clock's step whether it is fine or coarse: 0..~4 us in 21-ns steps (neighbours
    land in neighbouring steps of a clock of tens of ns) and 0..~23 us in 997-ns steps (enough distinct readings
    from a clock that moves once a microsecond or slower)."""
    return [21 * i for i in range(fine_readings)] + [997 * i for i in range(24)]


def timer_step_ns(durations_ns: list[float], same_within_ns: float = 4.0) -> tuple[float | None, int]:
    """The finest step a clock moves in, from many durations it timed: the smallest gap between two distinct
    readings. Readings closer than `same_within_ns` count as one (float milliseconds converted back to
    nanoseconds carry sub-nanosecond noise). Durations spread finely over a few microseconds land in
    neighbouring steps, so the smallest gap is the step itself (or, with too few readings, a multiple of it:
    an upper bound). Returns (step, distinct readings); step is None under 3 distinct readings."""
    distinct: list[float] = []
    for value in sorted(durations_ns):
        if not distinct or value - distinct[-1] >= same_within_ns:
            distinct.append(value)
    if len(distinct) < 3:
        return None, len(distinct)
    return min(b - a for a, b in zip(distinct, distinct[1:])), len(distinct)


def _chain_expected(start: int, steps: int) -> int:
    value = start
    for k in range(steps):
        value = (value * 3 + k) & 0xFFFFFFFF
    return value


def measure_event_timing(device: int = 0, back_to_back: int = 256, roundtrips: int = 200,
                         spin_us: float = 2000.0, queue_probe: int = 4096, chain_steps: int = 256,
                         step_readings: int = 200) -> EventTiming:
    import numpy as np

    started = time.perf_counter()
    cupy = require_gpu()
    info = device_info(device)
    with cupy.cuda.Device(device):
        stream = cupy.cuda.Stream(non_blocking=True)
        done = cupy.zeros(1, dtype=cupy.uint32)
        counter = cupy.zeros(1, dtype=cupy.uint32)
        cupy.cuda.Device(device).synchronize()  # the zeroing ran on the legacy stream; ours does not wait for it
        spin = kernels.kernel("opgate_spin")
        tiny = kernels.kernel("opgate_tiny")
        chain = kernels.kernel("opgate_chain_step")
        with stream:  # load every kernel before timing
            spin((1,), (32,), (np.uint64(1000), done))
            tiny((1,), (32,), (counter,))
        stream.synchronize()

        # 1. Back-to-back events: the finest interval events can tell apart.
        events = [cupy.cuda.Event() for _ in range(back_to_back)]
        for event in events:
            event.record(stream)
        stream.synchronize()
        intervals = [cupy.cuda.get_elapsed_time(events[i], events[i + 1]) * 1e3 for i in range(back_to_back - 1)]
        positive = [v for v in intervals if v > 0]
        smallest = min(positive) if positive else 0.0

        # 1b. Timer step: kernels waiting known times (by %globaltimer), each between two events; the smallest
        #     gap between distinct event-timed durations is the step event timestamps move in (what
        #     cudaEventElapsedTime's documented "resolution of around 0.5 microseconds" means).
        waits = timer_step_waits_ns(step_readings)
        pairs = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in waits]
        with stream:
            for wait_ns, (start, end) in zip(waits, pairs):
                start.record(stream)
                spin((1,), (32,), (np.uint64(wait_ns), done))
                end.record(stream)
        stream.synchronize()
        timer_step, readings = timer_step_ns([cupy.cuda.get_elapsed_time(a, b) * 1e6 for a, b in pairs])

        # 2. A kernel of known duration (by the GPU's %globaltimer) measured by events.
        spin_samples = []
        for _ in range(5):
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            with stream:
                start.record(stream)
                spin((1,), (32,), (np.uint64(int(spin_us * 1e3)), done))
                end.record(stream)
            stream.synchronize()
            spin_samples.append(cupy.cuda.get_elapsed_time(start, end) * 1e3)

        # 3. Round trip: launch + record, host polls the event until it completes.
        roundtrip = []
        for _ in range(roundtrips + 10):
            event = cupy.cuda.Event()
            t0 = time.perf_counter()
            with stream:
                tiny((1,), (32,), (counter,))
                event.record(stream)
            deadline = t0 + 10.0
            while not event.done:
                if time.perf_counter() > deadline:
                    raise ProbeError("a tiny kernel's event did not complete within 10 s: the GPU is hung or busy")
            roundtrip.append((time.perf_counter() - t0) * 1e6)
        roundtrip = roundtrip[10:]

        # 4. Asynchrony and queue depth: behind a long spin, launch calls must return at once, until the
        #    launch queue is full and a call blocks.
        busy = cupy.cuda.Event()
        with stream:
            spin((1,), (32,), (np.uint64(200_000_000), done))  # 200 ms
            busy.record(stream)
            t0 = time.perf_counter()
            tiny((1,), (32,), (counter,))
            first_call_us = (time.perf_counter() - t0) * 1e6
            returned_before_done = not busy.done
            depth: int | None = None
            for index in range(1, queue_probe):
                t0 = time.perf_counter()
                tiny((1,), (32,), (counter,))
                if (time.perf_counter() - t0) > 5e-3:  # blocked for 5 ms: the queue was full
                    depth = index
                    break
        stream.synchronize()

        # 5. Stream order: dependent single-thread steps must apply in issue order.
        start_value = 0x1234567
        value = cupy.asarray(np.array([start_value], dtype=np.uint32))
        cupy.cuda.Device(device).synchronize()
        with stream:
            for k in range(chain_steps):
                chain((1,), (1,), (value, np.uint32(k)))
        stream.synchronize()
        chain_ok = int(cupy.asnumpy(value)[0]) == _chain_expected(start_value, chain_steps)
        if not chain_ok:
            raise ProbeError("kernels on one stream did not apply in issue order: stream ordering is broken")
    return EventTiming(info, Samples.of(intervals), smallest, back_to_back - 1 - len(positive),
                       None if timer_step is None else timer_step / 1e3, readings, spin_us,
                       Samples.of(spin_samples), Samples.of(roundtrip), first_call_us, returned_before_done,
                       depth, queue_probe, chain_steps, chain_ok, time.perf_counter() - started)
