"""Merge node outcomes into one fleet RunReport (so --json, --junit and the terminal work as for every
verb): per-node rows with the failed and slowest nodes first, then the fleet baseline's outliers."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from opgate import __version__
from opgate.fleet.baseline import (MIN_GROUP_SIZE, MODIFIED_Z_LIMIT, GpuIdentity, NodeFigures,
                                   baseline_summary, find_outliers)
from opgate.fleet.node_task import NodeOutcome
from opgate.reporting.renderers import VerbRenderers
from opgate.reporting.schema import decode_result
from opgate.model.results import CheckResult, Figure, Outcome, RunReport, Threshold, slug, worst_outcome

BASELINE_SOURCE = ("fleet median/MAD per GPU model and driver; modified z-score limit 3.5 from Iglewicz & "
                   "Hoaglin, How to Detect and Handle Outliers (ASQC, 1993)")
NODE_CHECK = "fleet.node"
SEPARATOR = ":"  # "node-a:doctor.gpu_inventory"


def node_results(outcome: NodeOutcome) -> tuple[CheckResult, ...]:
    """The node's own check results; a node that did not answer is one `error` row."""
    if outcome.report is None:
        return (CheckResult(NODE_CHECK, "node answered", Outcome.ERROR, outcome.error or "no report",
                            duration_s=outcome.duration_s,
                            remediation="The node, not a check, failed: look at the node (ray status, its raylet "
                                        "logs) and re-run the fleet verb for it.",
                            extra={"stderr_tail": outcome.stderr_tail, **outcome.extra}),)
    results = tuple(decode_result(r) for r in outcome.report.get("results", ()))
    if outcome.error:  # a report and an error (e.g. a timeout after the report): keep both
        results += (CheckResult(NODE_CHECK, "node answered", Outcome.ERROR, outcome.error,
                                duration_s=outcome.duration_s),)
    return results


def node_outcome(outcome: NodeOutcome) -> Outcome:
    return worst_outcome([r.outcome for r in node_results(outcome)])


_SEVERITY = {Outcome.ERROR: 0, Outcome.FAILED: 1, Outcome.WARNED: 2, Outcome.PASSED: 3, Outcome.SKIPPED: 4}


def order_nodes(outcomes: Sequence[NodeOutcome]) -> list[NodeOutcome]:
    """Failed/error nodes first, then the slowest."""
    return sorted(outcomes, key=lambda o: (_SEVERITY[node_outcome(o)], -o.duration_s, o.node))


def node_figures(outcome: NodeOutcome) -> NodeFigures:
    gpus = tuple(GpuIdentity(int(g["index"]), str(g["model"]), str(g.get("driver", outcome.driver)))
                 for g in outcome.gpus)
    return NodeFigures(outcome.node, gpus, node_results(outcome), outcome.driver)


def baseline_results(outcomes: Sequence[NodeOutcome]) -> tuple[list[CheckResult], list[dict[str, Any]]]:
    answered = [node_figures(o) for o in outcomes if o.report is not None]
    results = []
    for outlier in find_outliers(answered):
        sample = outlier.sample
        check_id = f"{sample.node}{SEPARATOR}fleet.baseline.{outlier.key}"
        # The keys these rows had when reporting/metrics.py derived them (the contract reports and `opgate diff`
        # rely on): the check id's first two dot-separated parts (a node name with a dot cuts that stem short)
        # and the figure's name; a single GPU's index is a label, a pair's ("0-1") stays in the name.
        stem = ".".join(check_id.split(".")[:2])
        name = f"{'GPU' + sample.gpu + ' ' if sample.gpu else ''}{sample.figure}"
        own = sample.figure if sample.gpu.isdigit() else name
        figures = (
            Figure(name, sample.value, sample.unit, Threshold(MODIFIED_Z_LIMIT, "<=", BASELINE_SOURCE),
                   key=f"{stem}.{slug(own)}", labels={"gpu": sample.gpu} if sample.gpu.isdigit() else {}),
            Figure("fleet median", outlier.median, sample.unit, key=f"{stem}.fleet_median"),
            Figure("fleet MAD", outlier.mad, sample.unit, key=f"{stem}.fleet_mad"),
            Figure("modified z-score", round(outlier.modified_z, 2) if outlier.modified_z != float("inf")
                   else outlier.modified_z, key=f"{stem}.modified_z_score"),
            Figure("nodes in the group", outlier.group_size, key=f"{stem}.nodes_in_the_group"),
        )
        results.append(CheckResult(
            check_id, "fleet baseline", Outcome.WARNED,
            outlier.sentence(), figures,
            remediation="In-band for the datasheet but not for its siblings: compare the node's clocks, "
                        "power, PCIe link and firmware with a median node; re-run the probe to rule out noise.",
            extra={"key": outlier.key, "model": outlier.group[0], "driver": outlier.group[1]}))
    return results, list(baseline_summary(answered))


def fleet_report(verb: str, outcomes: Sequence[NodeOutcome], started_at: str, duration_s: float,
                 strict: bool, extra: dict[str, Any]) -> RunReport:
    results: list[CheckResult] = []
    for outcome in order_nodes(outcomes):
        for result in node_results(outcome):
            results.append(dataclasses.replace(result, check_id=f"{outcome.node}{SEPARATOR}{result.check_id}"))
    outliers, baseline = baseline_results(outcomes)
    nodes = [{"node": o.node, "hostname": o.hostname, "outcome": node_outcome(o).value, "exit_code": o.exit_code,
              "duration_s": round(o.duration_s, 3), "gpus": o.gpus, "driver": o.driver, "error": o.error,
              **o.extra} for o in order_nodes(outcomes)]
    return RunReport(
        verb=f"fleet {verb}", results=tuple(results) + tuple(outliers), started_at=started_at,
        duration_s=duration_s, host={"nodes": len(outcomes)}, tool_version=__version__, strict=strict,
        extra={**extra, "nodes": nodes, "baseline": baseline, "baseline_min_group": MIN_GROUP_SIZE},
    )


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def render_fleet_terminal(report: RunReport, console: Console, verbose: bool = False) -> None:
    """Node table (worst and slowest first), then every problem row (every row with --verbose)."""
    from opgate.reporting.terminal import outcome_text, render_terminal

    table = Table(title=f"opgate {report.verb}: nodes", show_lines=False)
    for column in ("node", "result", "checks", "time", "reason"):
        table.add_column(column, no_wrap=column != "reason")
    by_node: dict[str, list[CheckResult]] = {}
    for result in report.results:
        by_node.setdefault(result.check_id.split(SEPARATOR, 1)[0], []).append(result)
    for node in report.extra.get("nodes", []):
        rows = by_node.get(node["node"], [])
        counts = {}
        for r in rows:
            counts[r.outcome.value] = counts.get(r.outcome.value, 0) + 1
        worst = [r for r in rows if r.outcome in (Outcome.ERROR, Outcome.FAILED, Outcome.WARNED)]
        table.add_row(node["node"], outcome_text(Outcome(node["outcome"])),
                      ", ".join(f"{n} {k}" for k, n in counts.items()), f"{node['duration_s']:.1f}s",
                      Text(node["error"] or (worst[0].reason if worst else "")))
    console.print(table)
    if verbose:
        render_terminal(report, console, verbose=True)
        return
    problems = Table(title=f"opgate {report.verb}: problems", show_lines=True)
    for column in ("node:check", "result", "reason"):
        problems.add_column(column, no_wrap=column != "reason")
    for result in report.results:
        if result.outcome in (Outcome.ERROR, Outcome.FAILED, Outcome.WARNED):
            problems.add_row(result.check_id, outcome_text(result.outcome), Text(result.reason))
    if problems.row_count:
        console.print(problems)
    counts = ", ".join(f"{n} {name}" for name, n in report.counts().items() if n)
    console.print(f"{len(report.extra.get('nodes', []))} node(s): {counts} in {report.duration_s:.1f}s "
                  f"— exit code {int(report.exit_code)}" + (" (--strict: warnings fail)" if report.strict else ""))


# The `fleet` entry point of opgate.report.renderers: a fleet report's terminal summary is its node table.
RENDERERS = VerbRenderers(terminal=render_fleet_terminal)
