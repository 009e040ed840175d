"""Below the terminal table: what a crashed implementation (or a dead check process) printed last.

A crash verdict names its case and replay token in the reason; the lines the process wrote before it died
(the Python stack faulthandler dumps, glibc's `double free or corruption`, a CUDA error) are the evidence a
person reads first, so they are printed here in full width instead of inside a table cell.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from opgate.model.results import CheckResult, Outcome, RunReport


def render_crash_details(report: RunReport, console: Console) -> None:
    for result in report.results:
        crashes = result.extra.get("crashes") if isinstance(result.extra, dict) else None
        if crashes:
            for crash in crashes:
                shrinking = " (a case opgate tried while narrowing down a failure)" if crash.get("phase") == "shrink" else ""
                console.print(Text(f"{result.check_id}: the implementation {crash.get('status', 'crashed')} on "
                                   f"{crash.get('label', '?')}{shrinking}", style="bold red"), soft_wrap=True, crop=False,
                              overflow="ignore")  # one line, whole: people grep and copy it
                if crash.get("replay"):
                    console.print(Text(f"  replay: opgate {report.verb} {_spec_name(report, result)} --replay "
                                       f"{crash['replay']}"), soft_wrap=True, crop=False, overflow="ignore")
                _print_tail(console, crash.get("stderr_excerpt") or [])
        elif result.outcome is Outcome.ERROR and result.extra.get("stderr_tail"):
            from opgate.engine.children import stderr_excerpt

            console.print(Text(f"{result.check_id}: last lines of the check process's stderr", style="magenta"))
            _print_tail(console, stderr_excerpt(str(result.extra["stderr_tail"])))


def _spec_name(report: RunReport, result: CheckResult | None = None) -> str:
    """The spec file to replay a result with: its own (several spec files in one run), else the run's."""
    own = result.extra.get("spec_file") if result is not None and isinstance(result.extra, dict) else None
    spec = own or (report.extra.get("spec") if isinstance(report.extra, dict) else None)
    return str(spec) if spec else "SPEC.py"


def _print_tail(console: Console, lines: list[str]) -> None:
    if not lines:
        console.print(Text("  (its stderr was empty)", style="dim"))
    for line in lines:
        console.print(Text(f"  | {line}", style="dim"), soft_wrap=True, crop=False, overflow="ignore")
