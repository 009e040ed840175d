"""`opgate plan mig|mps|autoscale`: a typer sub-app; src/opgate/cli.py adds it with one line."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

plan_app = typer.Typer(name="plan", help="Plan GPU sharing (MIG, MPS) and autoscaling; emit the configs "
                       "schedulers read.", no_args_is_help=True, add_completion=False, rich_markup_mode=None)


def _console():
    from opgate.cli import make_console

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
                               "node)."),
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
