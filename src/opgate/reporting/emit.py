"""One output layer: every verb hands its RunReport here, and this writes JSON, JUnit, HTML, the Markdown summary
and the run history.

The terminal rendering stays with each verb (`opgate.reporting.terminal`); everything written to a file or a
database goes through `emit`, so `--json --junit --html --markdown --history` mean the same on every verb.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from opgate.model.results import RunReport

Printer = Callable[[str], None]


@dataclass(frozen=True)
class ReportOutputs:
    """Where one run's report goes; None means not wanted."""

    json: Optional[Path] = None
    junit: Optional[Path] = None
    html: Optional[Path] = None
    history: Optional[str] = None  # SQLite path or SQLAlchemy URL (postgresql://...)
    markdown: Optional[Path] = None

    @property
    def wanted(self) -> bool:
        return any(x is not None for x in (self.json, self.junit, self.html, self.history, self.markdown))


def check_outputs(outputs: ReportOutputs) -> None:
    """Before any work: --html and --markdown must be writable and a --history SQLite path's folder must exist
    (InputError)."""
    from opgate.cli.outputs import check_report_path

    check_report_path(outputs.html, "--html")
    check_report_path(outputs.markdown, "--markdown")
    if outputs.history:
        from opgate.reporting.history import check_history_target

        check_history_target(outputs.history)


def _write_json(report: RunReport, path: Path) -> None:
    from opgate.reporting.json_report import write_json

    write_json(report, path)


def _write_junit(report: RunReport, path: Path) -> None:
    from opgate.reporting.junit import write_junit

    write_junit(report, path)


def _write_html(report: RunReport, path: Path) -> None:
    from opgate.reporting.html import write_html

    write_html(report, path)


def _write_markdown(report: RunReport, path: Path) -> None:
    from opgate.reporting.markdown import write_markdown

    write_markdown(report, path)


def _files(outputs: ReportOutputs) -> list[tuple[str, Path, Callable[[RunReport, Path], None]]]:
    """(what it is, path, writer) of each requested report file, in the order they are written; the formats
    import lazily (HTML brings the charts)."""
    table = (("JSON report", outputs.json, _write_json), ("JUnit report", outputs.junit, _write_junit),
             ("HTML report", outputs.html, _write_html), ("Markdown summary", outputs.markdown, _write_markdown))
    return [(label, Path(path), write) for label, path, write in table if path is not None]


def emit(report: RunReport, outputs: ReportOutputs, say: Printer | None = None) -> None:
    """Write every requested output of `report`; `say` gets one line per file written."""
    tell = say or (lambda line: None)
    for label, path, write in _files(outputs):
        write(report, path)
        tell(f"{label}: {path}")
    if outputs.history:
        from opgate.reporting.history import append_run

        run_id = append_run(outputs.history, report)
        tell(f"run history: run {run_id} appended to {outputs.history}")


# Where this invocation writes its reports, set by the command line once the paths are checked: an interrupted run
# still writes there (emit_interrupted), from the verb (before its children stop) or from main.
_PLANNED: list[ReportOutputs] = [ReportOutputs()]


def plan_outputs(outputs: ReportOutputs) -> None:
    """Where this invocation's reports go, for emit_interrupted."""
    _PLANNED[0] = outputs


def planned_outputs() -> ReportOutputs:
    return _PLANNED[0]


# The report emit_interrupted last wrote, and what it said: a verb writes its report as soon as it is interrupted,
# before it stops its children (a CUDA context's teardown can outlast a CI runner's SIGTERM-to-SIGKILL grace), and
# `main` then only says where it is.
_LAST_INTERRUPTED: list[tuple[RunReport, str]] = []


def emit_interrupted(report: RunReport) -> str:
    """The report so far, marked interrupted, to the planned --json/--junit/--markdown/--html files (a CI job
    cancelled or timed out still gets its summary and its HTML), once per report; returns what to say about it.
    Not --history: a run cut short is no point of a trend. The cheap formats first, HTML (charts) last; a file
    that cannot be written is left out, the others still are."""
    if _LAST_INTERRUPTED and _LAST_INTERRUPTED[0][0] is report:
        return _LAST_INTERRUPTED[0][1]
    from opgate.model.errors import InputError

    written = []
    files = sorted(_files(planned_outputs()), key=lambda file: file[2] is _write_html)
    for _, path, write in files:
        try:
            write(report, path)
            written.append(str(path))
        except (OSError, InputError):
            pass
    said = ""
    if written:
        said = f"; the report so far ({len(report.results)} results, marked interrupted) is in {', '.join(written)}"
    _LAST_INTERRUPTED[:] = [(report, said)]
    return said
