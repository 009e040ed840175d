"""How an `opgate doctor` report renders beyond what every report shows (opgate.reporting.renderers), registered as
the `doctor` entry point of `opgate.report.renderers`: the command that re-runs one check at the run's level. The
rest (terminal summary, figures against their per-GPU bands, the host as the history subject) is the generic
rendering."""

from __future__ import annotations

from opgate.reporting.renderers import VerbRenderers
from opgate.model.results import CheckResult, RunReport


def replay_command(report: RunReport, result: CheckResult) -> str:
    level = report.extra.get("level", "basic")
    return f"opgate doctor --level {level} --check {result.check_id.split('.', 1)[-1]}"


RENDERERS = VerbRenderers(replay_command=replay_command)
