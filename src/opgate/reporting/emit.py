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


def emit(report: RunReport, outputs: ReportOutputs, say: Printer | None = None) -> None:
    """Write every requested output of `report`; `say` gets one line per file written."""
    tell = say or (lambda line: None)
    if outputs.json:
        from opgate.reporting.json_report import write_json

        write_json(report, outputs.json)
        tell(f"JSON report: {outputs.json}")
    if outputs.junit:
        from opgate.reporting.junit import write_junit

        write_junit(report, outputs.junit)
        tell(f"JUnit report: {outputs.junit}")
    if outputs.html:
        from opgate.reporting.html import write_html

        write_html(report, outputs.html)
        tell(f"HTML report: {outputs.html}")
    if outputs.markdown:
        from opgate.reporting.markdown import write_markdown

        write_markdown(report, outputs.markdown)
        tell(f"Markdown summary: {outputs.markdown}")
    if outputs.history:
        from opgate.reporting.history import append_run

        run_id = append_run(outputs.history, report)
        tell(f"run history: run {run_id} appended to {outputs.history}")
