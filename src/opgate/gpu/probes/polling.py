"""A background reading taken at a fixed interval while a probe runs (NVML's PCIe link state, clocks).

NVML has no per-kernel view: what a probe ran at is only seen by polling during it. One thread per poller,
started before the probe's work and stopped after it, with one last reading at stop.
"""

from __future__ import annotations

import threading
from typing import Callable


class Poller:
    """Calls `poll()` every `interval_s` in a daemon thread between start() and stop(), and once more at stop.
    `poll` returns False to end the polling early (a reading this GPU does not support)."""

    def __init__(self, poll: Callable[[], bool], interval_s: float, name: str) -> None:
        self._poll = poll
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        while self._poll():
            if self._stop.wait(self._interval_s):
                self._poll()  # the end of the window
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Idempotent; waits at most a second for the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)
