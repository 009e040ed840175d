"""Terminal summary: one row per check, then the figures that carry the evidence."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from opgate.reporting.crash_details import render_crash_details
from opgate.results import CheckResult, Outcome, RunReport

OUTCOME_STYLE = {
    Outcome.PASSED: ("PASS", "green"),
    Outcome.WARNED: ("WARN", "yellow"),
    Outcome.FAILED: ("FAIL", "bold red"),
    Outcome.SKIPPED: ("SKIP", "dim"),
    Outcome.ERROR: ("ERROR", "bold magenta"),
}


def outcome_text(outcome: Outcome) -> Text:
    label, style = OUTCOME_STYLE[outcome]
    return Text(label, style=style)


def _figure_lines(result: CheckResult, limit: int) -> str:
    lines = []
    for figure in result.figures[:limit]:
        value = f"{figure.value:.4g}" if isinstance(figure.value, float) else str(figure.value)
        line = f"{figure.name}: {value} {figure.unit}".rstrip()
        if figure.threshold is not None:
            line += f"  [{figure.threshold.comparison} {figure.threshold.value}]"
        lines.append(line)
    if len(result.figures) > limit:
        lines.append(f"... {len(result.figures) - limit} more in --json")
    return "\n".join(lines)


def render_terminal(report: RunReport, console: Console, verbose: bool = False) -> None:
    table = Table(title=f"opgate {report.verb}", show_lines=True, expand=False)
    table.add_column("check", style="cyan", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("reason")
    table.add_column("evidence", style="dim")
    table.add_column("time", justify="right", no_wrap=True)
    for result in report.results:
        reason = result.reason
        if result.remediation and result.outcome in (Outcome.FAILED, Outcome.WARNED, Outcome.ERROR):
            reason += f"\n→ {result.remediation}"
        table.add_row(  # Text(), not markup: reasons and paths may contain [brackets]
            result.check_id,
            outcome_text(result.outcome),
            Text(reason),
            Text(_figure_lines(result, limit=50 if verbose else 6)),
            f"{result.duration_s:.2f}s",
        )
    console.print(table)
    render_crash_details(report, console)
    counts = report.counts()
    summary = ", ".join(f"{n} {name}" for name, n in counts.items() if n)
    code = int(report.exit_code)
    console.print(f"{summary} in {report.duration_s:.1f}s — exit code {code}"
                  + (" (--strict: warnings fail)" if report.strict else ""))
