"""Ctrl-C and SIGTERM: every verb ends with one line and exit 130, writing the report so far when a run started.

One exception, `RunInterrupted`: the runner raises it with the checks that finished, the session adds the report
so far, verify adds its calibration results. It is a KeyboardInterrupt, so no `except Exception` on the way up
swallows it. typer turns a KeyboardInterrupt inside a command into a silent exit 130; `interruptible` keeps the
interrupt for `opgate.cli.main.main`, which writes the report so far (`opgate.reporting.emit.emit_interrupted`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

if TYPE_CHECKING:
    import threading

    from opgate.model.results import CheckResult, RunReport


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a run: every child is killed; `results` are the checks that finished, `not_run`
    the ids of those that did not, `report` the RunReport so far once the session has assembled it."""

    def __init__(self, results: Sequence["CheckResult"] = (), not_run: Sequence[str] = (),
                 report: Optional["RunReport"] = None) -> None:
        super().__init__("interrupted")
        self.results = list(results)
        self.not_run = list(not_run)
        self.report = report


# The interrupt the last verb ended with: typer answers it with exit 130 and drops it; main reads it here.
_CAUGHT: list[KeyboardInterrupt] = []


def interruptible(verb: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a verb so `main` learns of an interrupt (and the report so far) that typer turns into exit 130."""

    @functools.wraps(verb)
    def run(*args: Any, **kwargs: Any) -> Any:
        _STOPPING[0] = False  # a verb run in this process after an interrupted one (tests, the pytest plugin)
        _CAUGHT.clear()
        try:
            return verb(*args, **kwargs)
        except KeyboardInterrupt as stop:
            _CAUGHT[:] = [stop]
            raise

    return run


def take_caught() -> KeyboardInterrupt | None:
    """The interrupt the last verb ended with (once), or None when none did."""
    caught = _CAUGHT[0] if _CAUGHT else None
    _CAUGHT.clear()
    return caught


def report_of(stop: BaseException) -> Optional["RunReport"]:
    """The report so far an interrupt carries (None for a bare Ctrl-C before any check finished)."""
    return stop.report if isinstance(stop, RunInterrupted) else None


# Set by the first interrupt: the run is stopping, and a second signal must not stop the stopping.
_STOPPING = [False]


def raise_interrupt(signum: int, frame: object) -> None:
    """SIGTERM and SIGINT handler: stop the run, once. A second signal while the run writes its report and stops its
    children is ignored: timeout(1) signals opgate and then its whole process group, so opgate gets SIGTERM twice,
    and the second KeyboardInterrupt cut a library run's report short on the H200 (2026-12-02: "interrupted before
    any check finished" after 40 checks had). SIGKILL still ends it."""
    if _STOPPING[0]:
        return
    _STOPPING[0] = True
    raise KeyboardInterrupt


# -- --time-limit ---------------------------------------------------------------------------------------------------
# A run given a wall-clock limit stops itself at it the way SIGTERM stops it (the report so far, the verdicts kept
# for the next run: verify/verdict_reuse.py), before a CI job's own limit kills it without a report. Its exit code
# then says what the run found: 1 when a check failed, else 3 (opgate could not judge everything in time).
_TIME_LIMIT: list[float] = []  # the limit, once reached


def stop_at_time_limit(limit_s: float) -> "threading.Timer":
    """Send this process SIGTERM after `limit_s` seconds (a daemon timer: it never keeps the process alive)."""
    import os
    import signal
    import threading

    _TIME_LIMIT.clear()

    def reached() -> None:
        _TIME_LIMIT[:] = [limit_s]
        os.kill(os.getpid(), signal.SIGTERM)

    timer = threading.Timer(limit_s, reached)
    timer.daemon = True
    timer.start()
    return timer


def time_limit_reached() -> float | None:
    """The --time-limit that stopped this run, or None when none did."""
    return _TIME_LIMIT[0] if _TIME_LIMIT else None
