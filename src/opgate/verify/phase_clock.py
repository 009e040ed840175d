"""Seconds per phase of one check, for its result's extra["phase_s"]: where a slow check spends its time."""

from __future__ import annotations

import time


class PhaseClock:
    """Each `lap(name)` adds the seconds since the previous lap (or the clock's start) to `laps[name]`."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def restart(self) -> None:
        """The next lap counts from now (what came between is no phase's)."""
        self.last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(self.laps.get(name, 0.0) + now - self.last, 3)
        self.last = now
