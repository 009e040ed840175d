"""Finding the step an event clock moves in from the durations it timed (opgate.gpu.probes.events.timer_step_ns)."""

from __future__ import annotations

import math

from opgate.gpu.probes.events import timer_step_ns, timer_step_waits_ns


def quantised(step_ns: float, durations_ns: list[float]) -> list[float]:
    """What a clock ticking every step_ns reports for these true durations (start at an arbitrary phase)."""
    return [math.floor((d + 7.0) / step_ns) * step_ns - math.floor(7.0 / step_ns) * step_ns for d in durations_ns]


LAUNCH_NS = 2500.0  # what an empty kernel between two events adds to every reading
PROBE_WAITS = [LAUNCH_NS + wait for wait in timer_step_waits_ns()]  # the waits the probe runs


def test_a_32_ns_clock_is_found_from_a_fine_spread() -> None:
    step, distinct = timer_step_ns(quantised(32.0, PROBE_WAITS))
    assert step == 32.0 and distinct > 100


def test_a_microsecond_clock_is_found_too() -> None:
    step, distinct = timer_step_ns(quantised(1000.0, PROBE_WAITS))
    assert step == 1000.0 and distinct >= 20
    step, _ = timer_step_ns(quantised(500.0, PROBE_WAITS))  # cudaEventElapsedTime's documented ~0.5 us
    assert step == 500.0


def test_float_noise_from_milliseconds_does_not_invent_a_finer_step() -> None:
    # cudaEventElapsedTime gives float32 milliseconds: converted back to ns the readings carry tiny errors.
    noisy = [value + (0.3 if i % 2 else -0.3) for i, value in enumerate(quantised(32.0, PROBE_WAITS))]
    step, _ = timer_step_ns(noisy)
    assert step is not None and abs(step - 32.0) < 1.0


def test_too_few_distinct_readings_give_no_step() -> None:
    step, distinct = timer_step_ns([1000.0] * 50 + [2000.0] * 50)  # INPUT: every kernel timed alike
    assert step is None and distinct == 2
