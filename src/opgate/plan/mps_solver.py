"""The MPS share planner: which GPU each replica joins as an MPS client, with its
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, solved with OR-Tools CP-SAT.

Per GPU: pinned-memory limits add up to at most the GPU's memory less a reserve per client (the MPS server's and
each context's own overhead), thread percentages add up to at most 100 (MPS lets them oversubscribe; a plan that
promises QoS does not), and at most `max_clients` clients (data/mps_limits.toml).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

from opgate.data import load_table
from opgate.model.errors import InputError
from opgate.plan.inputs import Fleet, FleetGpu, Workload
from opgate.plan.layout import SolveStats, Unplaced
from opgate.plan.mig_solver import solver_name, status_name

MPS_EXACT_MAX_VARIABLES = 400_000


@dataclass(frozen=True)
class MpsClient:
    workload: str
    replica: int
    thread_percent: int
    pinned_mem_gb: float


@dataclass(frozen=True)
class MpsGpu:
    gpu: FleetGpu
    clients: tuple[MpsClient, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu.gpu_id, "node": self.gpu.node, "index": self.gpu.index, "model": self.gpu.slicing.key,
                "clients": [vars(c) for c in self.clients]}


@dataclass(frozen=True)
class MpsPlan:
    gpus: tuple[MpsGpu, ...]
    unplaced: tuple[Unplaced, ...]
    stats: SolveStats
    placed_replicas: int
    requested_replicas: int
    reserve_gb_per_client: float

    def to_dict(self) -> dict[str, Any]:
        return {"placed_replicas": self.placed_replicas, "requested_replicas": self.requested_replicas,
                "reserve_gb_per_client": self.reserve_gb_per_client, "stats": self.stats.to_dict(),
                "gpus": [g.to_dict() for g in self.gpus],
                "unplaced": [vars(u) for u in self.unplaced]}


def mps_limit(name: str) -> float:
    for row in load_table("mps_limits"):
        if row["limit"] == name:
            return float(row["value"])
    raise KeyError(name)


def plan_mps(fleet: Fleet, workloads: Sequence[Workload], time_limit_s: float = 30.0, workers: int = 2,
             reserve_gb_per_client: float = 0.5) -> MpsPlan:
    from ortools.sat.python import cp_model

    chosen = [w for w in workloads if w.isolation in ("mps", "any")]
    if not chosen:
        raise InputError("no workload asks for isolation = \"mps\" or \"any\"; `opgate plan mig` plans MIG instances")
    missing = [w.name for w in chosen if w.compute_percent <= 0]
    if missing:
        raise InputError(f"workload {missing[0]} has no compute_percent; MPS planning needs each replica's "
                         "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (1..100)")
    if len(chosen) * len(fleet.gpus) > MPS_EXACT_MAX_VARIABLES:
        raise InputError(f"{len(chosen)} workloads x {len(fleet.gpus)} GPUs is beyond the MPS model's "
                         f"{MPS_EXACT_MAX_VARIABLES} variables; plan one pool of GPUs at a time")
    max_clients = int(mps_limit("max_clients_per_device"))
    started = time.perf_counter()
    m = cp_model.CpModel()
    scale = len(fleet.gpus) + 1
    serve: dict[tuple[str, str], Any] = {}
    used = {g.gpu_id: m.NewBoolVar(f"used[{g.gpu_id}]") for g in fleet.gpus}
    objective = []
    for w in chosen:
        terms = []
        for g in fleet.gpus:
            if w.models and g.slicing.key not in w.models:
                continue
            if w.memory_gb + reserve_gb_per_client > g.slicing.memory_gb:
                continue
            var = m.NewIntVar(0, w.replicas, f"a[{w.name},{g.gpu_id}]")
            serve[(w.name, g.gpu_id)] = var
            terms.append(var)
            objective.append(var * scale * w.priority)
        if terms:
            m.Add(sum(terms) <= w.replicas)
    by_name = {w.name: w for w in chosen}
    for g in fleet.gpus:
        here = [(by_name[name], var) for (name, gid), var in serve.items() if gid == g.gpu_id]
        if not here:
            m.Add(used[g.gpu_id] == 0)
            continue
        mb = int(g.slicing.memory_gb * 1024)
        m.Add(sum(var * int((w.memory_gb + reserve_gb_per_client) * 1024) for w, var in here) <= mb * used[g.gpu_id])
        m.Add(sum(var * w.compute_percent for w, var in here) <= 100)
        m.Add(sum(var for _, var in here) <= max_clients)
        objective.append(-1 * used[g.gpu_id])
    m.Maximize(sum(objective))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = workers
    status_text = status_name(cp_model, solver.Solve(m))
    if status_text not in ("OPTIMAL", "FEASIBLE"):
        raise RuntimeError(f"CP-SAT found no solution ({status_text}) within {time_limit_s} s")
    stats = SolveStats(solver_name(), "mps", status_text, solver.ObjectiveValue(), solver.BestObjectiveBound(),
                       time.perf_counter() - started, len(serve) + len(used))
    next_replica = {w.name: 0 for w in chosen}
    gpus = []
    for g in fleet.gpus:
        clients = []
        for (name, gid), var in serve.items():
            if gid != g.gpu_id:
                continue
            w = by_name[name]
            for _ in range(solver.Value(var)):
                clients.append(MpsClient(name, next_replica[name], w.compute_percent, w.memory_gb))
                next_replica[name] += 1
        if clients:
            gpus.append(MpsGpu(g, tuple(clients)))
    unplaced = []
    for w in chosen:
        left = w.replicas - next_replica[w.name]
        if left:
            fits = [g for g in fleet.gpus if w.memory_gb + reserve_gb_per_client <= g.slicing.memory_gb
                    and (not w.models or g.slicing.key in w.models)]
            reason = (f"every GPU that can hold {w.memory_gb} GB + {reserve_gb_per_client} GB reserve is full "
                      f"(memory, 100% of threads or {max_clients} clients)" if fits else
                      f"no GPU of the fleet has {w.memory_gb} GB + {reserve_gb_per_client} GB reserve")
            unplaced.append(Unplaced(w.name, left, reason))
    requested = sum(w.replicas for w in chosen)
    return MpsPlan(tuple(gpus), tuple(unplaced), stats, requested - sum(u.replicas for u in unplaced), requested,
                   reserve_gb_per_client)


def check_mps_plan(plan: MpsPlan, workloads: Sequence[Workload]) -> list[str]:
    """Independent re-check of an MPS plan: per GPU memory, thread percentage, client count; replicas unique."""
    by_name = {w.name: w for w in workloads}
    problems = []
    seen = set()
    max_clients = int(mps_limit("max_clients_per_device"))
    for entry in plan.gpus:
        memory = sum(c.pinned_mem_gb + plan.reserve_gb_per_client for c in entry.clients)
        if memory > entry.gpu.slicing.memory_gb + 1e-6:
            problems.append(f"{entry.gpu.gpu_id}: {memory:.2f} GB pinned > {entry.gpu.slicing.memory_gb} GB")
        if sum(c.thread_percent for c in entry.clients) > 100:
            problems.append(f"{entry.gpu.gpu_id}: thread percentages add up past 100")
        if len(entry.clients) > max_clients:
            problems.append(f"{entry.gpu.gpu_id}: {len(entry.clients)} clients > {max_clients}")
        for c in entry.clients:
            w = by_name[c.workload]
            if c.pinned_mem_gb < w.memory_gb or c.thread_percent < w.compute_percent:
                problems.append(f"{entry.gpu.gpu_id}: {c.workload} gets less than it asked for")
            if (c.workload, c.replica) in seen or c.replica >= w.replicas:
                problems.append(f"{c.workload} replica {c.replica} placed twice or beyond its count")
            seen.add((c.workload, c.replica))
    return problems
