"""Terminal summary a person reads in one screen; everything else behind -v and in the JSON.

One row per check that ran; skipped checks collapse into one line per distinct reason, with a count
(all of them as rows under -v). Text a person has to copy (replay commands) is never cut in a
table cell: each failing case's full replay command is printed on its own line under the table.
"""

from __future__ import annotations

import re
from collections import defaultdict

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


# A check's reason may end with "; replay: opgate verify SPEC --replay TOKEN": the token goes under the table.
_REPLAY_TAIL = re.compile(r";\s*replay: opgate verify \S+ --replay \S+\s*$")
DEFAULT_FIGURES = 4


def replay_commands(report: RunReport) -> list[tuple[str, str]]:
    """(check id, full replay command) for every result that carries a replay token."""
    spec = report.extra.get("spec") if report.extra else None
    commands = []
    for result in report.results:
        token = result.extra.get("replay") if result.extra else None
        own = result.extra.get("spec_file") if result.extra else None  # several spec files in one run
        if isinstance(token, str) and token and result.outcome in (Outcome.FAILED, Outcome.ERROR):
            commands.append((result.check_id, f"opgate verify {own or spec or 'SPEC.py'} --replay {token}"))
    return commands


def skip_groups(results: list[CheckResult]) -> list[tuple[str, list[str]]]:
    """Skipped results grouped by identical reason, in first-seen order: (reason, check ids)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for result in results:
        if result.outcome is Outcome.SKIPPED:
            groups[result.reason].append(result.check_id)
    return list(groups.items())


def render_terminal(report: RunReport, console: Console, verbose: bool = False) -> None:
    table = Table(title=f"opgate {report.verb}", show_lines=True, expand=False)
    longest_id = max((len(r.check_id) for r in report.results), default=10)
    table.add_column("check", style="cyan", overflow="fold", min_width=min(longest_id, 40))
    table.add_column("result", no_wrap=True)
    table.add_column("reason", ratio=3, overflow="fold")
    table.add_column("evidence", style="dim", ratio=2, overflow="fold")
    table.add_column("time", justify="right", no_wrap=True)
    replays = dict(replay_commands(report))
    shown = [r for r in report.results if verbose or r.outcome is not Outcome.SKIPPED]
    for result in shown:
        reason = result.reason
        if result.check_id in replays:
            reason = _REPLAY_TAIL.sub("", reason) + "; replay command below the table"
        if result.remediation and result.outcome in (Outcome.FAILED, Outcome.WARNED, Outcome.ERROR):
            reason += f"\n→ {result.remediation}"
        table.add_row(  # Text(), not markup: reasons and paths may contain [brackets]
            result.check_id,
            outcome_text(result.outcome),
            Text(reason),
            Text(_figure_lines(result, limit=50 if verbose else DEFAULT_FIGURES)),
            f"{result.duration_s:.2f}s",
        )
    if shown:
        console.print(table)
    render_crash_details(report, console)
    if not verbose:
        for reason, ids in skip_groups(list(report.results)):
            label = f"SKIP x{len(ids)}" if len(ids) > 1 else "SKIP"
            console.print(Text.assemble((label, "dim"), f" {', '.join(ids)}: {reason}"), soft_wrap=False)
    for check_id, command in replays.items():
        console.print(f"replay {check_id}:", highlight=False)
        console.print(Text(f"  {command}"), soft_wrap=True, crop=False, overflow="ignore")
    counts = report.counts()
    summary = ", ".join(f"{n} {name}" for name, n in counts.items() if n)
    code = int(report.exit_code)
    tail = " (--strict: warnings fail)" if report.strict else ""
    if report.extra.get("interrupted") if report.extra else False:
        tail += " (interrupted: the checks that had not finished are not in this report)"
    console.print(f"{summary} in {report.duration_s:.1f}s — exit code {code}{tail}"
                  + ("" if verbose else "; details: -v or --json"))
