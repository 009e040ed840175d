"""What a plan is: per GPU, its instances (profile, start slot) and which workload replica each serves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opgate.plan.inputs import FleetGpu


@dataclass(frozen=True)
class Instance:
    profile: str  # MIG profile name, or "whole" for a GPU used without MIG
    start: int  # start slot on the placement axis (0 for a whole GPU)
    workload: str | None = None
    replica: int = 0


@dataclass(frozen=True)
class GpuLayout:
    gpu: FleetGpu
    instances: tuple[Instance, ...]

    @property
    def mig_enabled(self) -> bool:
        return any(i.profile != "whole" for i in self.instances)

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu.gpu_id, "node": self.gpu.node, "index": self.gpu.index,
                "model": self.gpu.slicing.key,
                "instances": [{"profile": i.profile, "start": i.start, "workload": i.workload,
                               "replica": i.replica} for i in self.instances]}


@dataclass(frozen=True)
class Unplaced:
    workload: str
    replicas: int
    reason: str


@dataclass(frozen=True)
class SolveStats:
    solver: str  # "OR-Tools CP-SAT 9.x"
    model: str  # "pattern" or "exact"
    status: str  # OPTIMAL / FEASIBLE / INFEASIBLE / UNKNOWN
    objective: float
    bound: float
    seconds: float
    variables: int

    @property
    def gap(self) -> float:
        """Relative gap between the best bound and the solution's objective (0 when proven optimal)."""
        if self.status == "OPTIMAL":
            return 0.0
        return abs(self.bound - self.objective) / max(1.0, abs(self.bound))

    def to_dict(self) -> dict[str, Any]:
        return {"solver": self.solver, "model": self.model, "status": self.status, "objective": self.objective,
                "bound": self.bound, "gap": self.gap, "seconds": round(self.seconds, 3), "variables": self.variables}


@dataclass(frozen=True)
class MigPlan:
    layouts: tuple[GpuLayout, ...]
    unplaced: tuple[Unplaced, ...]
    stats: SolveStats
    placed_replicas: int
    requested_replicas: int
    weighted_placed: int  # sum of priority x placed replicas: what the solver maximises first
    weighted_bound: int  # the solver's proven upper bound on weighted_placed

    @property
    def placement_gap(self) -> float:
        """Relative gap on what matters: priority-weighted replicas placed vs the proven bound."""
        return max(0.0, self.weighted_bound - self.weighted_placed) / max(1, self.weighted_bound)

    def to_dict(self) -> dict[str, Any]:
        return {"placed_replicas": self.placed_replicas, "requested_replicas": self.requested_replicas,
                "weighted_placed": self.weighted_placed, "weighted_bound": self.weighted_bound,
                "placement_gap": self.placement_gap, "stats": self.stats.to_dict(), "layouts": [layout.to_dict() for layout in self.layouts],
                "unplaced": [{"workload": u.workload, "replicas": u.replicas, "reason": u.reason}
                             for u in self.unplaced]}
