"""How an `opgate inspect` report renders beyond what every report shows (opgate.reporting.renderers), registered
as the `inspect` entry point of `opgate.report.renderers`: the binary x target verdict matrix, the binaries as the
history subject, and the command that re-judges one binary on one target."""

from __future__ import annotations

import shlex
from typing import Mapping

from opgate.reporting.renderers import Chart, VerbRenderers
from opgate.reporting.svg import matrix_chart
from opgate.model.results import CheckResult, RunReport


def inspect_matrix_chart(report: RunReport) -> list[Chart]:
    """Every binary on every target, coloured by its verdict (from the report's verdicts)."""
    cells: dict[tuple[str, str], str] = {}
    rows: list[str] = []
    columns: list[str] = []
    for verdict in report.extra.get("verdicts", []) or []:
        binary = str(verdict.get("binary", "?"))
        target = verdict.get("target", {})
        column = str(target.get("label", target) if isinstance(target, Mapping) else target)
        if binary not in rows:
            rows.append(binary)
        if column not in columns:
            columns.append(column)
        cells[(binary, column)] = str(verdict.get("status", ""))
    if not rows or not columns:
        return []
    return [("chart-fleet", "Fleet verdict matrix: every binary on every target (native SASS, PTX JIT, "
             "unsupported)", matrix_chart("Binary x target verdicts", rows, columns, cells, chart_id="svg-fleet"))]


def history_subject(report: RunReport) -> str:
    """The binaries inspected, by path."""
    return ",".join(sorted(str(b.get("path", "")) for b in report.extra.get("binaries", []))) or "(none)"


def replay_command(report: RunReport, result: CheckResult) -> str:
    extra = result.extra if isinstance(result.extra, Mapping) else {}
    binary, target = str(extra.get("binary", "")), extra.get("target", {})
    label = target.get("label", "") if isinstance(target, Mapping) else str(target)
    return f"opgate inspect {shlex.quote(binary)} --targets {label}".strip()


RENDERERS = VerbRenderers(charts=inspect_matrix_chart, history_subject=history_subject, replay_command=replay_command)
