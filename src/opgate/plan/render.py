"""Terminal rendering of plans (rich tables); large fleets are summarised per model, not listed GPU by GPU."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table

from opgate.plan.layout import MigPlan
from opgate.plan.mps_solver import MpsPlan

MAX_ROWS = 40


def _stats_line(stats, extra: str = "") -> str:
    gap = "proven optimal" if stats.status == "OPTIMAL" else f"gap {stats.gap:.4%} to the proven bound"
    return f"{stats.solver}, {stats.model} model: {stats.status}, {gap}, {stats.seconds:.2f}s, {stats.variables} vars{extra}"


def render_mig_plan(plan: MigPlan, console: Console) -> None:
    table = Table(title="MIG plan", show_lines=False)
    for column in ("GPU", "model", "instances (profile@start: workload/replica)"):
        table.add_column(column)
    for layout in plan.layouts[:MAX_ROWS]:
        text = ", ".join(f"{i.profile}@{i.start}: {i.workload}/{i.replica}" for i in layout.instances)
        table.add_row(layout.gpu.gpu_id, layout.gpu.slicing.key, text)
    console.print(table)
    if len(plan.layouts) > MAX_ROWS:
        per_model = Counter(layout.gpu.slicing.key for layout in plan.layouts)
        console.print(f"... {len(plan.layouts) - MAX_ROWS} more GPUs (in use per model: {dict(per_model)}); "
                      "every layout is in mig-plan.json")
    for item in plan.unplaced[:MAX_ROWS]:
        console.print(f"NOT PLACED {item.workload}: {item.replicas} replica(s): {item.reason}", highlight=False)
    if len(plan.unplaced) > MAX_ROWS:
        console.print(f"... {len(plan.unplaced) - MAX_ROWS} more workloads not (fully) placed; see mig-plan.json")
    console.print(f"{plan.placed_replicas}/{plan.requested_replicas} replicas placed on {len(plan.layouts)} GPU(s); "
                  f"priority-weighted {plan.weighted_placed} of at most {plan.weighted_bound} "
                  f"(placement gap {plan.placement_gap:.4%})", highlight=False)
    console.print(_stats_line(plan.stats), highlight=False)


def render_mps_plan(plan: MpsPlan, console: Console) -> None:
    table = Table(title="MPS plan")
    for column in ("GPU", "model", "clients (workload/replica: threads %, pinned GB)"):
        table.add_column(column)
    for entry in plan.gpus[:MAX_ROWS]:
        text = ", ".join(f"{c.workload}/{c.replica}: {c.thread_percent}%, {c.pinned_mem_gb:g}" for c in entry.clients)
        table.add_row(entry.gpu.gpu_id, entry.gpu.slicing.key, text)
    console.print(table)
    for item in plan.unplaced[:MAX_ROWS]:
        console.print(f"NOT PLACED {item.workload}: {item.replicas} replica(s): {item.reason}", highlight=False)
    console.print(f"{plan.placed_replicas}/{plan.requested_replicas} replicas placed on {len(plan.gpus)} GPU(s)",
                  highlight=False)
    console.print(_stats_line(plan.stats), highlight=False)
