"""`opgate plan mig|mps|autoscale`: a typer sub-app; src/opgate/cli/main.py adds it with one line."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from opgate.cli.outputs import check_output_folder

plan_app = typer.Typer(name="plan", help="Plan GPU sharing (MIG, MPS) and autoscaling; emit the configs "
                       "schedulers read.", no_args_is_help=True, add_completion=False, rich_markup_mode=None)


def _console():
    from opgate.cli.console import make_console

    return make_console()


def _load_topology(path: Optional[Path]) -> dict:
    if path is None:
        return {}
    from opgate.plan.topology_facts import load_topology_facts

    return load_topology_facts(path)


@plan_app.command("mig")
def plan_mig_command(
    workloads: Path = typer.Argument(..., help="Workload file (TOML or YAML, [[workload]] entries; see docs/plan.md)."),
    fleet: Path = typer.Option(..., "--fleet", help="Fleet file (TOML or YAML, [[gpu]] entries with model, count, "
                               "node), or `opgate doctor --json` report(s) (.json)."),
    topology: Optional[Path] = typer.Option(None, "--topology", help="Topology facts per node (JSON from "
                                            "`opgate doctor --check topology --json`, or {node: facts})."),
    out: Path = typer.Option(Path("opgate-report/plan"), "--out", help="Folder for the emitted configs."),
    model: str = typer.Option("auto", "--model", help="auto (exact for <= 64 GPUs or workload groups, else "
                              "pattern), pattern, or exact."),
    time_limit: float = typer.Option(30.0, "--time-limit", min=0.1, help="Seconds CP-SAT may search."),
    gap_limit: float = typer.Option(0.0, "--gap-limit", min=0.0, help="Stop once the relative gap is below this "
                                    "(0: search to proven optimality or the time limit)."),
    workers: int = typer.Option(2, "--workers", min=1, max=64, help="CP-SAT search workers."),
) -> None:
    """Carve MIG instances on every GPU and assign workload replicas to them (exit 1: something does not fit)."""
    from opgate.plan.emit import write_mig_outputs
    from opgate.plan.inputs import load_fleet, load_workloads
    from opgate.plan.legality import check_plan
    from opgate.plan.mig_solver import plan_mig
    from opgate.plan.render import render_mig_plan

    check_output_folder(out, "--out")  # before the search: a file there was a traceback after it
    console = _console()
    jobs = load_workloads(workloads)
    gpus = load_fleet(fleet)
    plan = plan_mig(gpus, jobs, time_limit_s=time_limit, workers=workers, model=model,
                    topology=_load_topology(topology), gap_limit=gap_limit)
    violations = check_plan(plan.layouts, jobs)
    if violations:  # the solver's model and the independent checker disagree: an opgate bug
        raise RuntimeError(f"the plan breaks a placement rule ({violations[0]}); please report this")
    written = write_mig_outputs(plan, gpus, jobs, out)
    render_mig_plan(plan, console)
    console.print(f"configs: {', '.join(str(p) for p in written)}")
    raise typer.Exit(1 if plan.unplaced else 0)


@plan_app.command("mps")
def plan_mps_command(
    workloads: Path = typer.Argument(..., help="Workload file (TOML or YAML); workloads with isolation mps or any."),
    fleet: Path = typer.Option(..., "--fleet", help="Fleet file (TOML or YAML, [[gpu]] entries)."),
    out: Path = typer.Option(Path("opgate-report/plan"), "--out", help="Folder for the emitted settings."),
    reserve_gb: float = typer.Option(0.5, "--reserve-gb", min=0.0, help="Device memory kept per client for its "
                                     "context beside its pinned limit, GB."),
    time_limit: float = typer.Option(30.0, "--time-limit", min=0.1, help="Seconds CP-SAT may search."),
    workers: int = typer.Option(2, "--workers", min=1, max=64, help="CP-SAT search workers."),
) -> None:
    """Share GPUs through MPS: per-client thread percentage and pinned-memory limit (exit 1: something does not
    fit)."""
    from opgate.plan.emit import write_mps_outputs
    from opgate.plan.inputs import load_fleet, load_workloads
    from opgate.plan.mps_solver import check_mps_plan, plan_mps
    from opgate.plan.render import render_mps_plan

    check_output_folder(out, "--out")
    console = _console()
    jobs = load_workloads(workloads)
    plan = plan_mps(load_fleet(fleet), jobs, time_limit_s=time_limit, workers=workers, reserve_gb_per_client=reserve_gb)
    problems = check_mps_plan(plan, jobs)
    if problems:
        raise RuntimeError(f"the MPS plan breaks a limit ({problems[0]}); please report this")
    written = write_mps_outputs(plan, out)
    render_mps_plan(plan, console)
    console.print(f"settings: {', '.join(str(p) for p in written)}")
    raise typer.Exit(1 if plan.unplaced else 0)


@plan_app.command("autoscale")
def plan_autoscale_command(
    trace: Path = typer.Argument(..., help="Request-rate trace CSV: t_s,requests_per_s, evenly spaced."),
    slo_p95_ms: float = typer.Option(..., "--slo-p95-ms", min=0.001, help="P95 latency SLO of one request, ms."),
    service_ms: Optional[float] = typer.Option(None, "--service-ms", min=0.001, help="Mean service time of one "
                                               "request on one replica slot, ms (or give --service-histogram)."),
    service_histogram: Optional[Path] = typer.Option(None, "--service-histogram", help="Model server latency "
                                                     "histogram CSV (le_s,count, cumulative) for the service time."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Requests one replica serves at once."),
    startup_s: float = typer.Option(60.0, "--startup-s", min=0.0, help="Seconds from pod start to serving."),
    min_replicas: int = typer.Option(1, "--min-replicas", min=1, help="HPA minReplicas."),
    max_replicas: int = typer.Option(40, "--max-replicas", min=1, help="HPA maxReplicas."),
    deployment: str = typer.Option("llm-server", "--deployment", help="Deployment the manifests scale."),
    served_model: str = typer.Option("llm", "--served-model", help="model_name label of the server's metrics."),
    prometheus: str = typer.Option("http://prometheus.monitoring.svc:9090", "--prometheus",
                                   help="Prometheus address KEDA queries."),
    out: Path = typer.Option(Path("opgate-report/plan"), "--out", help="Folder for the plot, manifests and JSON."),
) -> None:
    """Simulate HPA and KEDA over the trace; pick the target with the fewest replica-hours that holds the P95 SLO
    (exit 1: no policy holds it)."""
    import json

    import yaml

    from opgate.model.errors import InputError
    from opgate.plan import autoscale as scale

    if (service_ms is None) == (service_histogram is None):
        raise InputError("give exactly one of --service-ms or --service-histogram")
    check_output_folder(out, "--out")
    if min_replicas > max_replicas:
        raise InputError(f"--min-replicas {min_replicas} is above --max-replicas {max_replicas}")
    service_s = service_ms / 1000 if service_ms is not None else scale.service_from_histogram(service_histogram)
    model = scale.ServerModel(service_s=service_s, concurrency=concurrency, startup_s=startup_s,
                              min_replicas=min_replicas, max_replicas=max_replicas)
    slo_s = slo_p95_ms / 1000
    rates = scale.load_trace(trace)
    console = _console()
    report = scale.autoscale_report(rates, model, slo_s)
    out.mkdir(parents=True, exist_ok=True)
    for line in report.lines():
        console.print(line, highlight=False)
    runs = [r for r in (report.chosen, report.naive) if r is not None]
    plot = scale.plot_runs(rates, runs, slo_s, out / "autoscale.png")
    files = [plot]
    if report.chosen is not None:
        keda_choice = report.chosen if report.chosen.policy in scale.QUERIES else report.best_keda
        if keda_choice is not None:
            so = scale.scaled_object(f"{deployment}-scaler", deployment, keda_choice.policy, keda_choice.target,
                                     model, prometheus, served_model)
            (out / "keda-scaledobject.yaml").write_text(yaml.safe_dump(so, sort_keys=False))
            files.append(out / "keda-scaledobject.yaml")
        if report.best_queue is not None:
            hpa = scale.hpa_manifest(f"{deployment}-hpa", deployment, report.best_queue.target, model)
            (out / "hpa.yaml").write_text(yaml.safe_dump(hpa, sort_keys=False))
            files.append(out / "hpa.yaml")
    (out / "autoscale.json").write_text(json.dumps(report.to_dict(), indent=2))
    files.append(out / "autoscale.json")
    console.print(f"outputs: {', '.join(str(p) for p in files)}")
    raise typer.Exit(0 if report.chosen is not None else 1)
