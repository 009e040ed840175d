"""`--markdown PATH`: a short Markdown summary of one run for a CI job's page (GitHub's job summary, a GitLab
merge-request note), built from the RunReport like the JSON and HTML reports.

The verdict and what the exit code means; a table (one row per check, or the verb's own: verify's one row per
operator x implementation x dtype with its worst outcome, opgate.reporting.renderers); every failure, error and
warning with its reason, remedy and replay command; below a table whose rows carry no reasons, the skipped checks
grouped by reason.

GitHub drops a step's whole summary when it is over 1 MiB (the runner's annotation: "$GITHUB_STEP_SUMMARY upload
aborted, supports content up to a size of 1024k"), so long lists are cut here, each with a line saying how many
were left out, and the text stays under MAX_BYTES whatever the report holds.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from opgate.engine.atomic import write_atomically
from opgate.reporting.renderers import MarkdownTable, renderers_for
from opgate.reporting.replay import reason_without_replay, replay_command
from opgate.reporting.terminal import skip_groups
from opgate.model.results import CheckResult, ExitCode, Outcome, RunReport

# Half of GitHub's 1 MiB per step: a doctor and a verify summary appended in one step still fit.
MAX_BYTES = 512 * 1024
MAX_TABLE_ROWS = 200
MAX_PROBLEMS = 50
MAX_SKIP_GROUPS = 20
MAX_TEXT = 1500  # characters of one reason or remedy; the JSON and HTML reports keep the whole text
MAX_CELL = 160  # characters of a reason in a table cell

LABEL = {Outcome.PASSED: "PASS", Outcome.WARNED: "WARN", Outcome.FAILED: "**FAIL**", Outcome.SKIPPED: "SKIP",
         Outcome.ERROR: "**ERROR**"}

# The README's exit-code table, one line each.
EXIT_MEANINGS = {
    ExitCode.OK: "every check passed (warnings and skips allowed)",
    ExitCode.CHECK_FAILED: "a check failed (or warned under --strict, or was skipped under --fail-on-skip / "
                           "--require-gpu)",
    ExitCode.BAD_INPUT: "an input could not be read, so nothing was judged",
    ExitCode.INTERNAL_ERROR: "a check could not complete (crashed, hung past its timeout or raised) and nothing "
                             "failed outright",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C or SIGTERM): the checks that had not finished are not in this report",
}
VERDICT = {ExitCode.OK: "PASSED", ExitCode.CHECK_FAILED: "FAILED", ExitCode.BAD_INPUT: "BAD INPUT",
           ExitCode.INTERNAL_ERROR: "INCOMPLETE", ExitCode.INTERRUPTED: "INTERRUPTED"}
PROBLEM_ORDER = {Outcome.FAILED: 0, Outcome.ERROR: 1, Outcome.WARNED: 2}


_MARKUP = re.compile(r"[\\`*\[\]<>|~#]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def escape(text: str) -> str:
    """`text` as literal Markdown on one line: every character GitHub would read as markup is backslash-escaped
    (CommonMark allows it before any ASCII punctuation), `<` too, so a reason never opens an HTML tag. An `_`
    inside a word (sm_90, triton_tail_bug) stays as it is: it cannot start emphasis there."""
    return " ".join(_MARKUP.sub(lambda m: "\\" + m.group(0), text).split())


def code(text: str, in_table: bool = False) -> str:
    """`text` as an inline code span (a check id, a path); in a table cell `|` is escaped even there (GFM)."""
    fence = "``" if "`" in text else "`"
    return f"{fence}{text.replace('|', chr(92) + '|') if in_table else text}{fence}"


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def fit(blocks: Sequence[str], max_count: int, budget: int) -> tuple[list[str], int]:
    """The leading blocks within both `max_count` and `budget` bytes, and how many were left out."""
    taken: list[str] = []
    used = 0
    for block in blocks[:max_count]:
        size = len(block.encode()) + 1
        if used + size > budget:
            break
        taken.append(block)
        used += size
    return taken, len(blocks) - len(taken)


def left_out(count: int, what: str) -> list[str]:
    if not count:
        return []
    return ["", f"_… and {count} more {what} left out to keep this summary short; the --json or --html report "
                f"has every one._"]


def _header(report: RunReport) -> list[str]:
    code_ = report.exit_code
    counts = ", ".join(f"{n} {name}" for name, n in report.counts().items() if n) or "no checks"
    head = [f"## opgate {escape(report.verb)}: {VERDICT.get(code_, 'INCOMPLETE')}", "",
            f"**Exit code {int(code_)}**: {EXIT_MEANINGS.get(code_, 'see opgate --help')}. "
            f"{counts} in {report.duration_s:.1f} s" + (" (--strict: warnings fail)" if report.strict else "") + "."]
    facts = []
    extra = report.extra or {}
    if extra.get("spec"):
        facts.append(f"spec {code(str(extra['spec']))}")
    for key in ("budget", "level"):
        if extra.get(key):
            facts.append(f"{key} {escape(str(extra[key]))}")
    host = report.host or {}
    if host.get("hostname"):
        facts.append(f"host {code(str(host['hostname']))}")
    facts.append(f"started {escape(report.started_at)}")
    if report.tool_version:
        facts.append(f"opgate {escape(report.tool_version)}")
    head += ["", " · ".join(facts)]
    for error in report.input_errors[:MAX_PROBLEMS]:
        head += ["", f"**input could not be read**: {escape(cut(error, MAX_TEXT))}"]
    head += left_out(max(0, len(report.input_errors) - MAX_PROBLEMS), "unreadable inputs")
    return head


def _table(report: RunReport) -> MarkdownTable:
    """The verb's own table (opgate.reporting.renderers: verify's one row per operator x implementation x dtype),
    else one row per check with its reason."""
    own = renderers_for(report.verb).markdown_table
    if own is not None:
        return own(report)
    rows = tuple(f"| {code(r.check_id, True)} | {LABEL[r.outcome]} | "
                 f"{escape(cut(reason_without_replay(r.reason), MAX_CELL))} |" for r in report.results)
    return MarkdownTable(("| check | verdict | reason |", "| --- | --- | --- |"), rows)


def _problem(report: RunReport, result: CheckResult) -> str:
    lines = [f"{LABEL[result.outcome]} {code(result.check_id)} ({result.duration_s:.1f} s): "
             f"{escape(cut(reason_without_replay(result.reason), MAX_TEXT))}"]
    if result.remediation:
        lines.append(f"→ {escape(cut(result.remediation, MAX_TEXT))}")
    command = replay_command(report, result)
    fence = "````" if "```" in command else "```"
    return "  \n".join(lines) + f"\n\n{fence}sh\n{command}\n{fence}\n"


def _skipped(report: RunReport) -> list[str]:
    lines = []
    for reason, ids in skip_groups(list(report.results)):
        shown = ", ".join(code(i) for i in ids[:8]) + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")
        lines.append(f"- SKIP ×{len(ids)} {shown}: {escape(cut(reason, MAX_CELL))}")
    return lines


def render_markdown(report: RunReport, max_bytes: int = MAX_BYTES) -> str:
    """The summary, at most `max_bytes` UTF-8 bytes: the header always, then the table, the problems and the
    skipped checks each within a share of what is left."""
    out = _header(report)
    room = max_bytes - len("\n".join(out).encode()) - 1024  # 1 KiB for headings and the left-out lines
    table = _table(report)
    if table.rows:
        taken, dropped = fit(list(table.rows), MAX_TABLE_ROWS, room * 2 // 5)
        out += ["", *table.head, *taken, *left_out(dropped, "rows")]
    problems = sorted((r for r in report.results if r.outcome in PROBLEM_ORDER),
                      key=lambda r: PROBLEM_ORDER[r.outcome])
    if problems:
        heading = "Failures, errors and warnings" if any(r.outcome.is_problem for r in problems) else "Warnings"
        taken, dropped = fit([_problem(report, r) for r in problems], MAX_PROBLEMS, room * 2 // 5)
        out += ["", f"### {heading} ({len(problems)})", ""]
        out += ["\n".join(taken).rstrip("\n"), *left_out(dropped, "failures, errors and warnings")]
    skipped = [] if table.carries_reasons else _skipped(report)  # rows with reasons say why a check skipped
    if skipped:
        taken, dropped = fit(skipped, MAX_SKIP_GROUPS, room // 5)
        out += ["", "### Skipped", "", *taken, *left_out(dropped, "skip reasons")]
    return "\n".join(out) + "\n"


def write_markdown(report: RunReport, path: Path) -> None:
    write_atomically(path, render_markdown(report))
