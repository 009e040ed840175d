"""`opgate fleet doctor|verify|inspect`: the single-host verb on every node of a Ray cluster, one report.

Options after the fleet's own are passed to the node verb unchanged, e.g.
`opgate fleet doctor --address auto --max-nodes-at-once 8 --level standard`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional

import typer

from opgate.cli.options import json_report_option, junit_option, markdown_option, strict_option, verbose_option
from opgate.model.errors import InputError

fleet_app = typer.Typer(
    name="fleet", help="Run a verb on every node of a Ray cluster and merge one fleet report "
    "(per-node rows, failed and slowest nodes first, fleet-relative baselines).",
    no_args_is_help=True, add_completion=False, rich_markup_mode=None,
)

PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}
_ADDRESS_HELP = ("Ray cluster to use: auto, HOST:PORT or ray://HOST:PORT (default: start a local one-node "
                 "cluster).")


def run_fleet(verb: str, node_args: List[str], address: Optional[str], max_nodes_at_once: int,
              node_timeout: float, only_nodes: List[str], json_path: Optional[Path], junit_path: Optional[Path],
              strict: bool, verbose: bool, markdown_path: Optional[Path] = None) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from opgate.cli.console import make_console
    from opgate.fleet.cluster import alive_nodes, connect, run_on_nodes
    from opgate.fleet.report import fleet_report, node_outcome, now_iso
    from opgate.cli.outputs import check_distinct_outputs, check_report_path
    from opgate.reporting.emit import ReportOutputs, emit
    from opgate.reporting.terminal import render_summary

    reserved = {"--json", "--junit", "--markdown"} & set(node_args)
    if reserved:
        raise InputError(f"{sorted(reserved)[0]} was given twice: it is the fleet's own option (the merged report; "
                         "each node's report is collected for you); give it once, to `opgate fleet`")
    if json_path and not json_path.parent.is_dir():
        raise InputError(f"--json {json_path}: folder {json_path.parent} does not exist; create it first")
    check_report_path(markdown_path, "--markdown")
    check_distinct_outputs({"--json": json_path, "--junit": junit_path, "--markdown": markdown_path})
    console = make_console()
    started_at, t0 = now_iso(), time.perf_counter()
    ray = connect(address)
    nodes = alive_nodes(ray)
    if only_nodes:
        unknown = sorted(set(only_nodes) - {n.name for n in nodes})
        if unknown:
            raise InputError(f"--node {unknown[0]!r} is not an alive node of this cluster; alive: "
                             f"{', '.join(n.name for n in nodes)}")
        nodes = [n for n in nodes if n.name in set(only_nodes)]
    if not nodes:
        raise InputError(f"--address {address or 'local'}: the Ray cluster has no alive node; check `ray status`")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as progress:
        bar = progress.add_task(f"opgate fleet {verb}", total=len(nodes))

        def done(outcome) -> None:  # type: ignore[no-untyped-def]
            progress.advance(bar)
            if not console.is_terminal:
                console.print(f"  {node_outcome(outcome).value:8s} {outcome.node} ({outcome.duration_s:.1f}s)",
                              highlight=False)

        outcomes = run_on_nodes(ray, nodes, [verb, *node_args], node_timeout, max_nodes_at_once, on_done=done)
    report = fleet_report(verb, outcomes, started_at, time.perf_counter() - t0, strict,
                          {"node_args": list(node_args), "address": address or "local",
                           "max_nodes_at_once": max_nodes_at_once})
    render_summary(report, console, verbose=verbose)  # the fleet's node table (fleet.report.RENDERERS)
    emit(report, ReportOutputs(json=json_path, junit=junit_path, markdown=markdown_path), console.print)
    return int(report.exit_code)


def _fleet_command(verb: str, summary: str):  # type: ignore[no-untyped-def]
    def command(
        ctx: typer.Context,
        address: Optional[str] = typer.Option(None, "--address", help=_ADDRESS_HELP),
        max_nodes_at_once: int = typer.Option(16, "--max-nodes-at-once", min=1, help="Nodes running the verb "
                                              "at once (one task per node, so probes never share a GPU)."),
        node_timeout: float = typer.Option(900.0, "--node-timeout", min=1.0, help="Seconds one node may take "
                                           "before it is reported as an error row."),
        node: Optional[List[str]] = typer.Option(None, "--node", help="Only this node (repeatable; names as in "
                                                 "the report)."),
        json_path: Optional[Path] = json_report_option("Write the merged fleet report as JSON (atomically)."),
        junit_path: Optional[Path] = junit_option("node x check"),
        markdown_path: Optional[Path] = markdown_option(),
        strict: bool = strict_option("Treat warnings (baseline outliers too) as failures (exit 1)."),
        verbose: bool = verbose_option("Show every node's every check."),
    ) -> None:
        raise typer.Exit(run_fleet(verb, list(ctx.args), address, max_nodes_at_once, node_timeout, list(node or []),
                                   json_path, junit_path, strict, verbose, markdown_path))

    command.__doc__ = summary + " Unknown options go to the node verb unchanged."
    command.__name__ = verb
    return command


fleet_app.command("doctor", context_settings=PASSTHROUGH)(
    _fleet_command("doctor", "opgate doctor on every node (e.g. --level standard --check hbm_bandwidth)."))
fleet_app.command("verify", context_settings=PASSTHROUGH)(
    _fleet_command("verify", "opgate verify SPEC.py on every node (the spec path must exist on each node)."))
fleet_app.command("inspect", context_settings=PASSTHROUGH)(
    _fleet_command("inspect", "opgate inspect PATHS on every node (paths as seen on each node)."))
