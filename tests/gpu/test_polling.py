"""The background poller behind the PCIe-link and clock samplers (opgate.gpu.probes.polling)."""

from __future__ import annotations

import threading

from opgate.gpu.probes.polling import Poller


def test_polls_until_stopped_and_once_more_at_stop() -> None:
    readings: list[int] = []
    three_seen = threading.Event()

    def poll() -> bool:
        readings.append(len(readings))
        if len(readings) >= 3:
            three_seen.set()
        return True

    poller = Poller(poll, 0.001, "test-poller")
    poller.start()
    assert three_seen.wait(5.0)
    before_stop = len(readings)
    poller.stop()
    assert len(readings) >= before_stop + 1  # the end of the window is read too, even between intervals
    after_stop = len(readings)
    poller.stop()  # idempotent
    assert len(readings) == after_stop


def test_a_poll_that_returns_false_ends_the_polling() -> None:
    calls: list[int] = []

    def unsupported() -> bool:  # INPUT: a reading the GPU does not support
        calls.append(1)
        return False

    poller = Poller(unsupported, 0.001, "test-poller")
    poller.start()
    poller.stop()
    assert calls == [1]
