"""The command that re-runs one check, for every verb: the replay token of a verify failure, or the verb with the
options that select just that check (each verb's `VerbRenderers.replay_command`). One home, so the HTML page and the
Markdown summary print the same line."""

from __future__ import annotations

import re

from opgate.reporting.renderers import renderers_for
from opgate.model.results import CheckResult, RunReport

# A check's reason may end with "; replay: opgate verify SPEC --replay TOKEN": readers show the command on its own.
REPLAY_TAIL = re.compile(r";\s*replay: opgate verify \S+ --replay (\S+)\s*$")


def reason_without_replay(reason: str) -> str:
    """`reason` without its trailing replay command (shown apart, as a line to copy)."""
    return REPLAY_TAIL.sub("", reason)


def replay_command(report: RunReport, result: CheckResult) -> str:
    """The command that re-runs just this check: its verb's (opgate.reporting.renderers; verify's replay token),
    else the verb alone."""
    own = renderers_for(report.verb).replay_command
    return own(report, result) if own is not None else f"opgate {report.verb}"
