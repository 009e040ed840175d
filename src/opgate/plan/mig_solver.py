"""The MIG capacity planner: which GPU instances to carve on every GPU, and which workload replica each serves,
so that as much as possible fits (priority first), solved with OR-Tools CP-SAT.

Two models of the same problem:

* **pattern** (any fleet size): GPUs of one model are interchangeable, so the solver picks how many GPUs of
  each model take each legal layout (enumerated from the placement rules) and how many replicas of each class
  of alike workloads each profile serves. A 1,000-GPU fleet is a few thousand integer variables.
* **exact** (small fleets, and whenever workloads form co-scheduled groups): one placement variable per GPU x
  legal (profile, start), one count per workload x GPU x profile. It honours topology: a group goes on one node,
  never across a GPU pair whose link crosses the CPU interconnect (nvidia-smi topo "SYS"), and prefers GPUs on
  the NUMA node of a NIC.

Both maximise priority-weighted placed replicas first, then use as few compute slices as possible.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

from opgate.model.errors import InputError
from opgate.plan.inputs import Fleet, Workload
from opgate.plan.layout import GpuLayout, Instance, MigPlan, SolveStats, Unplaced
from opgate.plan.profiles import WHOLE_GPU, GpuSlicing, MigProfile

EXACT_MODEL_MAX_GPUS = 64


@dataclass(frozen=True)
class Choice:
    """One way to serve a replica: a profile on a GPU model."""

    model: str
    profile: str
    compute_slices: int
    memory_gb: float
    memory_slots: int = 8


def _fits(profile_memory: float, profile_slices: int, size_class: str, workload: Workload) -> bool:
    if profile_memory + 1e-9 < workload.memory_gb or profile_slices < workload.min_compute_slices:
        return False
    if workload.min_throughput and size_class != WHOLE_GPU:
        return workload.throughput.get(size_class, 0.0) >= workload.min_throughput
    return True


def choices_for(workload: Workload, slicings: Sequence[GpuSlicing]) -> tuple[Choice, ...]:
    """Every (model, profile) that can serve one replica: a MIG profile, or a whole non-MIG GPU."""
    found = []
    for slicing in slicings:
        if workload.models and slicing.key not in workload.models:
            continue
        if slicing.mig_capable:
            for profile in slicing.profiles:
                if _fits(profile.memory_gb, profile.compute_slices, profile.size_class, workload):
                    found.append(Choice(slicing.key, profile.name, profile.compute_slices, profile.memory_gb,
                                          profile.memory_slices))
        elif _fits(slicing.memory_gb, 7, WHOLE_GPU, workload):
            found.append(Choice(slicing.key, WHOLE_GPU, 7, slicing.memory_gb, 8))
    return tuple(found)


# -- legal layouts --------------------------------------------------------------------------------------------
Placement = tuple[str, int]  # (profile, start)


def _placements(slicing: GpuSlicing) -> list[tuple[MigProfile, int]]:
    return [(p, s) for p in slicing.profiles for s in p.starts]


@functools.lru_cache(maxsize=None)
def legal_layouts(slicing: GpuSlicing) -> tuple[tuple[Placement, ...], ...]:
    """Every maximal set of placements the rules allow on one GPU (no placement can be added to it). A subset of
    a legal layout is legal, so unused instances can be dropped from a chosen layout."""
    if not slicing.mig_capable:
        return (((WHOLE_GPU, 0),),)
    options = _placements(slicing)
    results: list[tuple[Placement, ...]] = []

    def can_add(state: tuple[int, int, int, int, dict[str, int]], profile: MigProfile, start: int) -> bool:
        mask, compute, count, media, per_profile = state
        bits = ((1 << profile.memory_slices) - 1) << start
        return (start + profile.memory_slices <= slicing.memory_slots and not mask & bits
                and compute + profile.compute_slices <= slicing.compute_slices and count < slicing.max_instances
                and not (profile.media_extensions and media)
                and per_profile.get(profile.name, 0) < profile.max_instances)

    def add(state, profile: MigProfile, start: int):
        mask, compute, count, media, per_profile = state
        updated = dict(per_profile)
        updated[profile.name] = updated.get(profile.name, 0) + 1
        return (mask | (((1 << profile.memory_slices) - 1) << start), compute + profile.compute_slices, count + 1,
                media + profile.media_extensions, updated)

    def walk(first: int, state, chosen: list[Placement]) -> None:
        extended = False
        for position in range(first, len(options)):
            profile, start = options[position]
            if can_add(state, profile, start):
                extended = True
                chosen.append((profile.name, start))
                walk(position + 1, add(state, profile, start), chosen)
                chosen.pop()
        if not extended and chosen:
            # maximal only if nothing at all (also earlier in the order) can be added
            if not any(can_add(state, p, s) for p, s in options):
                results.append(tuple(chosen))

    walk(0, (0, 0, 0, 0, {}), [])
    # layouts that differ only in start slots serve the same counts: keep one per multiset of profiles
    unique: dict[tuple[tuple[str, int], ...], tuple[Placement, ...]] = {}
    for layout in results:
        counts = tuple(sorted(_count(layout).items()))
        unique.setdefault(counts, layout)
    return tuple(unique.values())


def _count(layout: Sequence[Placement]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for profile, _ in layout:
        counts[profile] += 1
    return dict(counts)


# -- solving ---------------------------------------------------------------------------------------------------
def solver_name() -> str:
    import ortools

    return f"OR-Tools CP-SAT {ortools.__version__}"


def status_name(cp_model, status: int) -> str:
    return {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE", cp_model.INFEASIBLE: "INFEASIBLE",
            cp_model.MODEL_INVALID: "MODEL_INVALID"}.get(status, "UNKNOWN")


def _solve(m: object, model_name: str, time_limit_s: float, workers: int, gap_limit: float, started: float,
           variables: int) -> tuple[object, SolveStats]:
    """Run CP-SAT on model `m` (either model's settings: time limit, workers, relative gap); the solver (to read
    values from) and the stats, or RuntimeError when it found no solution in time."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = workers
    solver.parameters.relative_gap_limit = gap_limit
    status_text = status_name(cp_model, solver.Solve(m))
    if status_text not in ("OPTIMAL", "FEASIBLE"):
        raise RuntimeError(f"CP-SAT found no solution ({status_text}) within {time_limit_s} s")
    return solver, SolveStats(solver_name(), model_name, status_text, solver.ObjectiveValue(),
                              solver.BestObjectiveBound(), time.perf_counter() - started, variables)


def _why_unplaced(workload: Workload, slicings: Sequence[GpuSlicing]) -> str:
    choices = choices_for(workload, slicings)
    if not choices:
        biggest = max((max([p.memory_gb for p in s.profiles] or [s.memory_gb]) for s in slicings), default=0.0)
        needs = [f"{workload.memory_gb} GB"]
        if workload.min_compute_slices > 1:
            needs.append(f"{workload.min_compute_slices} compute slices")
        if workload.min_throughput:
            needs.append(f"{workload.min_throughput} req/s (measured: {dict(workload.throughput) or 'none'})")
        where = f" on {', '.join(workload.models)}" if workload.models else ""
        return (f"no instance on this fleet{where} can hold it: needs {' and '.join(needs)}; the largest instance "
                f"has {biggest} GB")
    names = sorted({f"{c.profile} ({c.model})" for c in choices})
    return f"fits {', '.join(names[:6])}{' ...' if len(names) > 6 else ''} but every such instance is taken " \
           "by higher-priority or already-placed replicas"


def plan_mig(fleet: Fleet, workloads: Sequence[Workload], time_limit_s: float = 30.0, workers: int = 2,
             model: str = "auto", topology: Mapping[str, object] | None = None, gap_limit: float = 0.0) -> MigPlan:
    """Solve the MIG plan. `model`: auto (exact when the fleet is small or groups exist), pattern or exact."""
    mig_workloads = [w for w in workloads if w.isolation in ("mig", "any")]
    if not mig_workloads:
        raise InputError("no workload asks for isolation = \"mig\" or \"any\"; `opgate plan mps` plans MPS shares")
    has_groups = any(w.group for w in mig_workloads)
    if model == "auto":
        model = "exact" if (has_groups or len(fleet.gpus) <= EXACT_MODEL_MAX_GPUS) else "pattern"
    if model == "pattern" and has_groups:
        raise InputError(f"workload groups need the exact model, which takes fleets up to {EXACT_MODEL_MAX_GPUS} "
                         f"GPUs per run; this fleet has {len(fleet.gpus)}: plan the grouped workloads per node")
    if model == "pattern":
        return _solve_pattern(fleet, mig_workloads, time_limit_s, workers, gap_limit)
    if model == "exact":
        return _solve_exact(fleet, mig_workloads, time_limit_s, workers, topology or {}, gap_limit)
    raise InputError(f"--model {model!r}: choose auto, pattern or exact")


def _slicings(fleet: Fleet) -> list[GpuSlicing]:
    return [gpus[0].slicing for gpus in fleet.by_model().values()]


def _weight_scale(fleet: Fleet) -> int:
    return 24 * len(fleet.gpus) + 24  # one more placed replica outweighs any saving in instance cost (<= 23/GPU)


def instance_cost(choice: Choice) -> int:
    """What a replica's instance costs in the secondary objective: two per compute slice, one per memory slot,
    one more for media extensions (+me holds the GPU's only media-engine instance; keep it free)."""
    return 2 * choice.compute_slices + choice.memory_slots + (1 if "+me" in choice.profile else 0)


def _solve_pattern(fleet: Fleet, workloads: Sequence[Workload], time_limit_s: float, workers: int,
                   gap_limit: float) -> MigPlan:
    from ortools.sat.python import cp_model

    started = time.perf_counter()
    slicings = _slicings(fleet)
    by_model = fleet.by_model()
    scale = _weight_scale(fleet)
    # classes of interchangeable workloads: same eligible choices and priority
    classes: dict[tuple[tuple[Choice, ...], int], list[Workload]] = defaultdict(list)
    for workload in workloads:
        classes[(choices_for(workload, slicings), workload.priority)].append(workload)
    m = cp_model.CpModel()
    layout_vars: dict[tuple[str, int], object] = {}
    capacity: dict[tuple[str, str], list[tuple[object, int]]] = defaultdict(list)
    for slicing in slicings:
        count = len(by_model[slicing.key])
        terms = []
        for index, layout in enumerate(legal_layouts(slicing)):
            var = m.NewIntVar(0, count, f"n[{slicing.key},{index}]")
            layout_vars[(slicing.key, index)] = var
            terms.append(var)
            for profile, times in _count(layout).items():
                capacity[(slicing.key, profile)].append((var, times))
        m.Add(sum(terms) <= count)
    serve: dict[tuple[int, Choice], object] = {}
    objective = []
    uses: dict[tuple[str, str], list[object]] = defaultdict(list)
    for k, ((choices, priority), members) in enumerate(classes.items()):
        demand = sum(w.replicas for w in members)
        if not choices:
            continue
        served = []
        for choice in choices:
            var = m.NewIntVar(0, demand, f"a[{k},{choice.model},{choice.profile}]")
            serve[(k, choice)] = var
            served.append(var)
            uses[(choice.model, choice.profile)].append(var)
            objective.append(var * (scale * priority - instance_cost(choice)))
        m.Add(sum(served) <= demand)
    for key, users in uses.items():
        m.Add(sum(users) <= sum(var * times for var, times in capacity[key]))
    m.Maximize(sum(objective))
    solver, stats = _solve(m, "pattern", time_limit_s, workers, gap_limit, started, len(layout_vars) + len(serve))
    # decode: give each GPU of a model a chosen layout, then hand instances to replicas class by class
    layouts_by_gpu: dict[str, list[Placement]] = {}
    free: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)  # (model, profile) -> [(gpu_id, start)]
    for slicing in slicings:
        gpus = iter(by_model[slicing.key])
        for index, layout in enumerate(legal_layouts(slicing)):
            for _ in range(solver.Value(layout_vars[(slicing.key, index)])):
                gpu = next(gpus)
                layouts_by_gpu[gpu.gpu_id] = list(layout)
                for profile, start in layout:
                    free[(slicing.key, profile)].append((gpu.gpu_id, start))
    assigned: dict[tuple[str, int], tuple[str, int]] = {}  # (gpu_id, start) -> (workload, replica)
    unplaced: list[Unplaced] = []
    for k, ((choices, _), members) in enumerate(classes.items()):
        slots = []
        for choice in choices:
            n = solver.Value(serve[(k, choice)])
            pool = free[(choice.model, choice.profile)]
            slots += [(choice, pool.pop()) for _ in range(n)]
        position = 0
        for workload in sorted(members, key=lambda w: (-w.replicas, w.name)):
            missing = 0
            for replica in range(workload.replicas):
                if position < len(slots):
                    _, where = slots[position]
                    assigned[where] = (workload.name, replica)
                    position += 1
                else:
                    missing += 1
            if missing:
                unplaced.append(Unplaced(workload.name, missing, _why_unplaced(workload, slicings)))
    gpu_by_id = {g.gpu_id: g for g in fleet.gpus}
    layouts = []
    for gpu_id, layout in layouts_by_gpu.items():
        instances = []
        for profile, start in layout:
            owner = assigned.get((gpu_id, start))
            if owner is not None:  # unused instances are dropped: a subset of a legal layout stays legal
                instances.append(Instance(profile, start, owner[0], owner[1]))
        if instances:
            layouts.append(GpuLayout(gpu_by_id[gpu_id], tuple(sorted(instances, key=lambda i: i.start))))
    requested = sum(w.replicas for w in workloads)
    placed = requested - sum(u.replicas for u in unplaced)
    return _finish(tuple(sorted(layouts, key=lambda l: l.gpu.gpu_id)), tuple(unplaced), stats, workloads, scale)


def link_is_poor(topology: Mapping[str, object], node: str, a: int, b: int) -> bool:
    """True when two GPUs of one node talk across the CPU interconnect (nvidia-smi topo SYS) per the topology
    facts recorded for that node; unknown topology is not poor."""
    facts = topology.get(node)
    if not isinstance(facts, Mapping):
        return False
    matrix = facts.get("links")
    if not isinstance(matrix, Sequence) or a >= len(matrix) or b >= len(matrix[a]):
        return False
    return str(matrix[a][b]).upper() in ("SYS",)


def nic_local(topology: Mapping[str, object], node: str, index: int) -> bool:
    """True when the GPU sits on a NUMA node that also holds a NIC (so its network traffic stays local)."""
    facts = topology.get(node)
    if not isinstance(facts, Mapping):
        return True
    gpu_numa = facts.get("gpu_numa") or []
    nic_numa = set(facts.get("nic_numa") or [])
    if index >= len(gpu_numa) or not nic_numa:
        return True
    return gpu_numa[index] in nic_numa


def _solve_exact(fleet: Fleet, workloads: Sequence[Workload], time_limit_s: float, workers: int,
                 topology: Mapping[str, object], gap_limit: float) -> MigPlan:
    from ortools.sat.python import cp_model

    if len(fleet.gpus) > EXACT_MODEL_MAX_GPUS * 4:
        raise InputError(f"the exact model takes at most {EXACT_MODEL_MAX_GPUS * 4} GPUs; this fleet has "
                         f"{len(fleet.gpus)}: use --model pattern (without workload groups)")
    started = time.perf_counter()
    slicings = _slicings(fleet)
    scale = _weight_scale(fleet)
    m = cp_model.CpModel()
    place: dict[tuple[str, str, int], object] = {}
    serve: dict[tuple[str, str, str], object] = {}
    objective = []
    for gpu in fleet.gpus:
        s = gpu.slicing
        if not s.mig_capable:
            place[(gpu.gpu_id, WHOLE_GPU, 0)] = m.NewBoolVar(f"y[{gpu.gpu_id},whole]")
            continue
        for profile, start in _placements(s):
            place[(gpu.gpu_id, profile.name, start)] = m.NewBoolVar(f"y[{gpu.gpu_id},{profile.name}@{start}]")
        for slot in range(s.memory_slots):
            m.Add(sum(place[(gpu.gpu_id, p.name, st)] for p, st in _placements(s)
                      if st <= slot < st + p.memory_slices) <= 1)
        m.Add(sum(place[(gpu.gpu_id, p.name, st)] * p.compute_slices for p, st in _placements(s)) <= s.compute_slices)
        m.Add(sum(place[(gpu.gpu_id, p.name, st)] for p, st in _placements(s)) <= s.max_instances)
        m.Add(sum(place[(gpu.gpu_id, p.name, st)] for p, st in _placements(s) if p.media_extensions) <= 1)
        for p in s.profiles:
            m.Add(sum(place[(gpu.gpu_id, p.name, st)] for st in p.starts) <= p.max_instances)
    groups: dict[str, list[Workload]] = defaultdict(list)
    for workload in workloads:
        if workload.group:
            groups[workload.group].append(workload)
    group_uses: dict[tuple[str, str], object] = {}
    served_total: dict[str, list[object]] = defaultdict(list)
    for workload in workloads:
        for choice in choices_for(workload, slicings):
            for gpu in fleet.gpus:
                if gpu.slicing.key != choice.model:
                    continue
                var = m.NewIntVar(0, workload.replicas, f"a[{workload.name},{gpu.gpu_id},{choice.profile}]")
                serve[(workload.name, gpu.gpu_id, choice.profile)] = var
                served_total[workload.name].append(var)
                objective.append(var * (scale * workload.priority - instance_cost(choice)))
                if workload.group:
                    key = (workload.group, gpu.gpu_id)
                    if key not in group_uses:
                        group_uses[key] = m.NewBoolVar(f"u[{workload.group},{gpu.gpu_id}]")
                    m.Add(var <= workload.replicas * group_uses[key])
        m.Add(sum(served_total[workload.name]) <= workload.replicas)
    for gpu in fleet.gpus:
        profiles = {p for (_, g, p) in serve if g == gpu.gpu_id}
        for profile in profiles:
            capacity = sum(var for (g, p, _), var in place.items() if g == gpu.gpu_id and p == profile)
            m.Add(sum(var for (w, g, p), var in serve.items() if g == gpu.gpu_id and p == profile) <= capacity)
    for group, members in groups.items():
        whole = m.NewBoolVar(f"z[{group}]")  # a group is placed whole or not at all
        for workload in members:
            m.Add(sum(served_total[workload.name]) == workload.replicas * whole)
        node_vars = {node: m.NewBoolVar(f"v[{group},{node}]") for node in fleet.nodes}
        m.Add(sum(node_vars.values()) <= 1)
        group_gpus = [g for g in fleet.gpus if (group, g.gpu_id) in group_uses]
        for gpu in group_gpus:
            m.Add(group_uses[(group, gpu.gpu_id)] <= node_vars[gpu.node])
            if not nic_local(topology, gpu.node, gpu.index):
                objective.append(-1 * group_uses[(group, gpu.gpu_id)])
        for i, a in enumerate(group_gpus):
            for b in group_gpus[i + 1:]:
                if a.node == b.node and link_is_poor(topology, a.node, a.index, b.index):
                    m.Add(group_uses[(group, a.gpu_id)] + group_uses[(group, b.gpu_id)] <= 1)
    m.Maximize(sum(objective))
    solver, stats = _solve(m, "exact", time_limit_s, workers, gap_limit, started,
                           len(place) + len(serve) + len(group_uses))
    layouts = []
    next_replica: dict[str, int] = defaultdict(int)
    for gpu in fleet.gpus:
        chosen = sorted([(p, st) for (g, p, st), var in place.items() if g == gpu.gpu_id and solver.Value(var)],
                        key=lambda x: x[1])
        instances = []
        for (w, g, p), var in sorted(serve.items()):
            if g != gpu.gpu_id:
                continue
            for _ in range(solver.Value(var)):
                start = next(st for prof, st in chosen if prof == p)
                chosen.remove((p, start))
                instances.append(Instance(p, start, w, next_replica[w]))
                next_replica[w] += 1
        if instances:
            layouts.append(GpuLayout(gpu, tuple(sorted(instances, key=lambda i: i.start))))
    unplaced = []
    for workload in workloads:
        missing = workload.replicas - next_replica[workload.name]
        if missing:
            reason = _why_unplaced(workload, slicings)
            if workload.group and choices_for(workload, slicings):
                reason = (f"group {workload.group!r} is placed whole or not at all, on one node, on GPUs not linked "
                          "across the CPU interconnect; " + reason)
            unplaced.append(Unplaced(workload.name, missing, reason))
    return _finish(tuple(layouts), tuple(unplaced), stats, workloads, scale)


def _finish(layouts: tuple[GpuLayout, ...], unplaced: tuple[Unplaced, ...], stats: SolveStats,
            workloads: Sequence[Workload], scale: int) -> MigPlan:
    import math

    priority = {w.name: w.priority for w in workloads}
    weighted = sum(priority[i.workload] for layout in layouts for i in layout.instances if i.workload)
    requested = sum(w.replicas for w in workloads)
    placed = requested - sum(u.replicas for u in unplaced)
    # objective = scale x weighted - slices, with 0 <= slices < scale: the bound on weighted is ceil(bound / scale)
    bound = max(weighted, math.ceil(stats.bound / scale - 1e-9)) if stats.status != "OPTIMAL" else weighted
    return MigPlan(layouts, unplaced, stats, placed, requested, weighted, bound)
