"""The command that re-runs one check, for every verb: the replay token of a verify failure, or the verb with the
options that select just that check. One home, so the HTML page and the Markdown summary print the same line."""

from __future__ import annotations

import re
import shlex
from typing import Mapping

from opgate.reporting.metrics import check_labels, metric_for
from opgate.results import CheckResult, RunReport

# A check's reason may end with "; replay: opgate verify SPEC --replay TOKEN": readers show the command on its own.
REPLAY_TAIL = re.compile(r";\s*replay: opgate verify \S+ --replay (\S+)\s*$")


def reason_without_replay(reason: str) -> str:
    """`reason` without its trailing replay command (shown apart, as a line to copy)."""
    return REPLAY_TAIL.sub("", reason)


def replay_command(report: RunReport, result: CheckResult) -> str:
    """The command that re-runs just this check (the CLI's replay token where verify has one)."""
    extra = result.extra if isinstance(result.extra, Mapping) else {}
    if report.verb == "verify":
        spec = str(extra.get("spec_file") or report.extra.get("spec") or report.extra.get("spec_file") or "SPEC.py")
        token = extra.get("replay")
        if isinstance(token, str) and token:
            return f"opgate verify {shlex.quote(spec)} --replay {token}"
        labels = metric_for(result, result.figures[0]).labels if result.figures else _check_only_labels(result)
        parts = ["opgate", "verify", shlex.quote(spec)]
        if labels.get("op"):
            parts += ["--op", shlex.quote(labels["op"])]
        if labels.get("impl"):
            parts += ["--impl", shlex.quote(labels["impl"])]
        if labels.get("dtype"):
            parts += ["--dtype", labels["dtype"]]
        return " ".join(parts)
    if report.verb == "doctor":
        level = report.extra.get("level", "basic")
        return f"opgate doctor --level {level} --check {result.check_id.split('.', 1)[-1]}"
    if report.verb == "inspect":
        binary, target = str(extra.get("binary", "")), extra.get("target", {})
        label = target.get("label", "") if isinstance(target, Mapping) else str(target)
        return f"opgate inspect {shlex.quote(binary)} --targets {label}".strip()
    if report.verb == "analyze":
        spec = str(report.extra.get("spec_file", "SPEC.py"))
        target = result.check_id.rsplit(".", 1)[-1]
        return f"opgate analyze {shlex.quote(spec)} --targets {target}"
    return f"opgate {report.verb}"


def _check_only_labels(result: CheckResult) -> dict[str, str]:
    """Labels from the check id alone (an error row has no figures): verify.OP.IMPL.DTYPE; an op-wide stage
    (verify.OP.runtime) names no implementation."""
    stem, labels = check_labels(result)
    if labels.get("impl") == stem.split(".", 1)[-1]:
        del labels["impl"]
    return labels
