"""How an `opgate verify` report renders beyond what every report shows (opgate.reporting.renderers), registered
as the `verify` entry point of `opgate.report.renderers`: its charts (opgate.verify.report_charts), one Markdown
row per operator x implementation x dtype, the spec file as the history subject, and each check's replay line."""

from __future__ import annotations

import shlex
from collections import defaultdict
from typing import Mapping

from opgate.reporting.markdown import LABEL, code, escape
from opgate.reporting.metrics import check_labels, metric_for
from opgate.reporting.renderers import MarkdownTable, VerbRenderers
from opgate.model.results import CheckResult, Outcome, RunReport, worst_outcome
from opgate.verify.report_charts import verify_charts


def history_subject(report: RunReport) -> str:
    """The spec file, else the operators the run verified ("ops:gelu,softmax")."""
    if report.extra.get("spec_file"):
        return str(report.extra["spec_file"])
    return "ops:" + ",".join(sorted({op for op in map(_op_of, report.results) if op}))


def _op_of(result: CheckResult) -> str:
    """The operator a verify result judged: the label its task was planned with, else its check id's second part
    (verify.OP.IMPL...; a report written before results carried labels)."""
    if result.labels.get("op"):
        return result.labels["op"]
    parts = result.check_id.split(".")
    return parts[1] if len(parts) >= 3 else ""


def replay_command(report: RunReport, result: CheckResult) -> str:
    """The replay token's command where the result has one, else the run narrowed to its op, impl and dtype."""
    extra = result.extra if isinstance(result.extra, Mapping) else {}
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


def _check_only_labels(result: CheckResult) -> dict[str, str]:
    """Labels from the check id alone (an error row has no figures): verify.OP.IMPL.DTYPE; an op-wide stage
    (verify.OP.runtime) names no implementation."""
    stem, labels = check_labels(result)
    if labels.get("impl") == stem.split(".", 1)[-1]:
        del labels["impl"]
    return labels


def markdown_table(report: RunReport) -> MarkdownTable:
    """One row per operator x implementation x dtype: its worst outcome and each stage's outcome. An op-wide
    result (calibration, a stage skipped for want of a GPU) is the operator's row with no implementation."""
    groups: dict[tuple[str, str, str], list[tuple[str, Outcome]]] = defaultdict(list)
    for result in report.results:
        stem, labels = check_labels(result)
        stage = stem.split(".", 1)[-1]
        impl = labels.get("impl", "")
        if impl == stage:  # verify.OP.STAGE: the stage of the whole operator, not an implementation
            impl = ""
        if impl and labels.get("tool"):  # an implementation's sanitizer results: one per tool
            stage = f"{stage}:{labels['tool']}"
        groups[(labels.get("op", result.check_id), impl, labels.get("dtype", ""))].append((stage, result.outcome))
    rows = []
    for (op, impl, dtype), stages in groups.items():
        worst = worst_outcome([outcome for _, outcome in stages])
        detail = ", ".join(f"{stage} {LABEL[outcome].strip('*')}" for stage, outcome in stages)
        rows.append(f"| {code(op, True)} | {code(impl, True) if impl else 'all'} | {dtype or '—'} | "
                    f"{LABEL[worst]} | {escape(detail)} |")
    return MarkdownTable(("| operator | implementation | dtype | verdict | stages |", "| --- | --- | --- | --- | --- |"),
                         tuple(rows), carries_reasons=False)


RENDERERS = VerbRenderers(charts=verify_charts, markdown_table=markdown_table, history_subject=history_subject,
                          replay_command=replay_command)
