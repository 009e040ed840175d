"""Terminal summary a person reads in one screen; everything else behind -v and in the JSON.

By default one line per check that passed (verdict, check, its reason cut to the terminal's width, time), then
each warning, failure and error with its whole reason, the remedy, and its replay command on one line of its own
(never wrapped inside a cell: it is text to copy); skipped checks collapse into one line per distinct reason, with
a count; the summary line last. `-v`: a table with every check's evidence (figures and thresholds), skipped ones
as rows.
"""

from __future__ import annotations

import re
from collections import defaultdict

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from opgate.reporting.crash_details import render_crash_details
from opgate.reporting.replay import REPLAY_TAIL
from opgate.model.results import CheckResult, Outcome, RunReport

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


def _spec_as_given(report: RunReport, result: CheckResult) -> str:
    """The spec file of `result` as the user gave it (several spec files in one run: the result's own)."""
    spec = report.extra.get("spec") if report.extra else None
    own = result.extra.get("spec_file") if result.extra else None
    return str(own or spec or "SPEC.py")


def replay_commands(report: RunReport) -> list[tuple[str, str]]:
    """(check id, full replay command) for every result that carries a replay token."""
    commands = []
    for result in report.results:
        token = result.extra.get("replay") if result.extra else None
        if isinstance(token, str) and token and result.outcome in (Outcome.FAILED, Outcome.ERROR):
            commands.append((result.check_id, f"opgate verify {_spec_as_given(report, result)} --replay {token}"))
    return commands


def skip_groups(results: list[CheckResult]) -> list[tuple[str, list[str]]]:
    """Skipped results grouped by identical reason, in first-seen order: (reason, check ids)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for result in results:
        if result.outcome is Outcome.SKIPPED:
            groups[result.reason].append(result.check_id)
    return list(groups.items())


def render_summary(report: RunReport, console: Console, verbose: bool = False) -> None:
    """The report's terminal summary: its verb's own (opgate.reporting.renderers: the fleet's node table,
    analyze's problems below its matrix), else `render_terminal`."""
    from opgate.reporting.renderers import renderers_for

    (renderers_for(report.verb).terminal or render_terminal)(report, console, verbose)


def render_terminal(report: RunReport, console: Console, verbose: bool = False) -> None:
    if verbose:
        _render_table(report, console)
    else:
        _render_lines(report, console)
    _render_tail(report, console, verbose)


def _render_lines(report: RunReport, console: Console) -> None:
    """One line per passing check; a warning, failure or error with its reason, remedy and replay command."""
    replays = dict(replay_commands(report))
    for result in report.results:
        if result.outcome is Outcome.SKIPPED:
            continue
        label, style = OUTCOME_STYLE[result.outcome]
        head = Text.assemble((f"{label:5} ", style), (result.check_id, "cyan"))
        took = f"  {result.duration_s:.1f}s"
        if isinstance(result.extra, dict) and result.extra.get("cached_from"):  # verify's verdict cache
            took += " (reused)"
        if result.outcome is Outcome.PASSED:
            room = max(0, console.width - len(head) - len(took) - 2)
            reason = _short_pass(result.reason)
            reason = reason if len(reason) <= room else reason[:max(0, room - 3)] + "..."
            console.print(Text.assemble(head, "  ", (reason, "dim"), took), no_wrap=True, overflow="crop",
                          crop=True)
            continue
        console.print(Text.assemble(head, took))
        reason = result.reason
        tail = REPLAY_TAIL.search(reason)
        if tail is not None:  # a warning's replay (a calibration warning) too, not only a failure's
            reason = reason[:tail.start()]
            replays.setdefault(result.check_id, f"opgate verify {_spec_as_given(report, result)} --replay "
                                                f"{tail.group(1)}")
        console.print(Padding(Text(reason), (0, 0, 0, 6)))
        if result.remediation:
            console.print(Padding(Text(f"→ {result.remediation}"), (0, 0, 0, 6)))
        if result.check_id in replays:
            console.print(Text(f"      {replays[result.check_id]}"), soft_wrap=True, crop=False, overflow="ignore")
    render_crash_details(report, console)


# A numerics PASS: "33/33 cases within budget on cpu; worst at 4% of its budget (M=64,N=17 ...)"
_NUMERICS_PASS = re.compile(r"^(\d+/\d+) cases within budget on (.+?); worst at (\S+) of its budget")


def _short_pass(reason: str) -> str:
    """A passing numerics check's reason as "33/33 ok, worst 4% of budget": the worst case against its budget fits
    one line at 80 columns beside a long check id, where the full reason was cut before it (the device and the
    case are under -v). Other reasons as they are."""
    match = _NUMERICS_PASS.match(reason)
    if match is None:
        return reason
    cases, _, worst = match.groups()
    return f"{cases} ok, worst {worst} of budget"


def _render_table(report: RunReport, console: Console) -> None:
    table = Table(title=f"opgate {report.verb}", show_lines=True, expand=False)
    longest_id = max((len(r.check_id) for r in report.results), default=10)
    table.add_column("check", style="cyan", overflow="fold", min_width=min(longest_id, 40))
    table.add_column("result", no_wrap=True)
    table.add_column("reason", ratio=3, overflow="fold")
    table.add_column("evidence", style="dim", ratio=2, overflow="fold")
    table.add_column("time", justify="right", no_wrap=True)
    replays = dict(replay_commands(report))
    shown = list(report.results)
    for result in shown:
        reason = result.reason
        if result.check_id in replays:
            reason = REPLAY_TAIL.sub("", reason) + "; replay command below the table"
        if result.remediation and result.outcome in (Outcome.FAILED, Outcome.WARNED, Outcome.ERROR):
            reason += f"\n→ {result.remediation}"
        table.add_row(  # Text(), not markup: reasons and paths may contain [brackets]
            result.check_id,
            outcome_text(result.outcome),
            Text(reason),
            Text(_figure_lines(result, limit=50)),
            f"{result.duration_s:.2f}s",
        )
    if shown:
        console.print(table)
    render_crash_details(report, console)
    for check_id, command in replays.items():
        console.print(f"replay {check_id}:", highlight=False)
        console.print(Text(f"  {command}"), soft_wrap=True, crop=False, overflow="ignore")


def _render_tail(report: RunReport, console: Console, verbose: bool) -> None:
    """The skipped checks grouped by reason (not under -v: they are rows there), then the summary line."""
    if not verbose:
        for reason, ids in skip_groups(list(report.results)):
            label = f"SKIP x{len(ids)}" if len(ids) > 1 else "SKIP"
            console.print(Text.assemble((label, "dim"), f" {', '.join(ids)}: {reason}"), soft_wrap=False)
    counts = report.counts()
    summary = ", ".join(f"{n} {name}" for name, n in counts.items() if n)
    code = int(report.exit_code)
    tail = " (--strict: warnings fail)" if report.strict else ""
    if report.extra.get("interrupted") if report.extra else False:
        tail += " (interrupted: the checks that had not finished are not in this report)"
    console.print(f"{summary} in {report.duration_s:.1f}s — exit code {code}{tail}"
                  + ("" if verbose else "; details: -v or --json"))
