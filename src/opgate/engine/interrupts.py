"""Ctrl-C and SIGTERM: every verb ends with one line and exit 130, writing the report so far when a run started.

typer turns a KeyboardInterrupt inside a command into a silent exit 130, so each verb is wrapped
(`interruptible`) to carry the interrupt, and the RunReport of the checks that finished, to `opgate.cli.main`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, Optional

from opgate.model.errors import InputError

# Where this invocation writes its reports, set once the paths are checked: an interrupted run still writes there.
REPORT_PATHS: dict[str, Optional[Path]] = {"json": None, "junit": None, "markdown": None}


class Interrupted(Exception):
    """Ctrl-C/SIGTERM inside a verb, carried past typer (which would turn KeyboardInterrupt into a silent
    exit 130) to `main`; `report` is the report so far when a run had started."""

    def __init__(self, report: Any = None) -> None:
        super().__init__("interrupted")
        self.report = report


def interruptible(verb: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a verb so an interrupt reaches `main` with the report so far."""

    @functools.wraps(verb)
    def run(*args: Any, **kwargs: Any) -> Any:
        _STOPPING[0] = False  # a verb run in this process after an interrupted one (tests, the pytest plugin)
        try:
            return verb(*args, **kwargs)
        except KeyboardInterrupt as stop:
            raise Interrupted(getattr(stop, "report", None)) from None

    return run


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


# The report write_interrupted_report last wrote, and what it said: a verb writes its report as soon as it is
# interrupted, before it stops its children (a CUDA context's teardown can outlast a CI runner's SIGTERM-to-SIGKILL
# grace), and `main` then only says where it is.
_LAST_WRITTEN: list[tuple[Any, str]] = []


def write_interrupted_report(report: Any) -> str:
    """The report so far, marked interrupted, to the --json/--junit/--markdown paths (a CI job cancelled or timed
    out still gets its summary), once per report; returns what to say about it."""
    if _LAST_WRITTEN and _LAST_WRITTEN[0][0] is report:
        return _LAST_WRITTEN[0][1]
    from opgate.reporting.json_report import write_json
    from opgate.reporting.junit import write_junit
    from opgate.reporting.markdown import write_markdown

    writers = {"json": write_json, "junit": write_junit, "markdown": write_markdown}
    written = []
    for kind, path in REPORT_PATHS.items():
        if path is None:
            continue
        try:
            writers[kind](report, path)
            written.append(str(path))
        except (OSError, InputError):
            pass
    said = ""
    if written:
        said = f"; the report so far ({len(report.results)} results, marked interrupted) is in {', '.join(written)}"
    _LAST_WRITTEN[:] = [(report, said)]
    return said
