"""An independent legality checker for emitted layouts.

Written apart from the solver (`opgate.plan.mig_solver`): it reads the profile table itself and checks each
GPU's instances slot by slot, the way `nvidia-smi mig -cgi` would refuse them. The property tests run every
layout the solver emits through it.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from opgate.data import load_table
from opgate.plan.inputs import Workload
from opgate.plan.layout import GpuLayout


@dataclass(frozen=True)
class Violation:
    gpu: str
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.gpu}: {self.rule}: {self.detail}"


@functools.lru_cache(maxsize=None)
def _profile_rows() -> dict[tuple[str, str], Mapping]:
    return {(row["gpu"], row["profile"]): row for row in load_table("mig_profiles")}


@functools.lru_cache(maxsize=None)
def _gpu_limits() -> dict[str, Mapping]:
    from importlib import resources

    try:
        import tomllib  # type: ignore[import-not-found]
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    text = resources.files("opgate.data").joinpath("mig_profiles.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)["gpus"]


def check_gpu(model: str, gpu_id: str, placed: Sequence[tuple[str, int]], whole_memory_gb: float | None = None
              ) -> list[Violation]:
    """Violations of one GPU's instances [(profile, start)] under NVIDIA's placement rules."""
    rows = _profile_rows()
    limits = _gpu_limits().get(model)
    found: list[Violation] = []
    whole = [p for p in placed if p[0] == "whole"]
    if whole:
        if len(placed) != 1:
            found.append(Violation(gpu_id, "whole GPU", "a GPU used whole holds exactly one instance"))
        return found
    if limits is None:
        found.append(Violation(gpu_id, "not MIG-capable", f"{model} has no MIG profiles in the table"))
        return found
    slots = [""] * int(limits["memory_slots"])
    compute = 0
    counts: Counter[str] = Counter()
    media = 0
    for profile, start in placed:
        row = rows.get((model, profile))
        if row is None:
            found.append(Violation(gpu_id, "unknown profile", f"{profile} is not a {model} profile"))
            continue
        if start not in row["starts"]:
            found.append(Violation(gpu_id, "illegal start", f"{profile} may start at {row['starts']}, not {start}"))
        for slot in range(start, start + int(row["memory_slices"])):
            if slot >= len(slots):
                found.append(Violation(gpu_id, "past the end", f"{profile}@{start} reaches slot {slot}"))
            elif slots[slot]:
                found.append(Violation(gpu_id, "overlap", f"{profile}@{start} and {slots[slot]} share slot {slot}"))
            else:
                slots[slot] = f"{profile}@{start}"
        compute += int(row["compute_slices"])
        counts[profile] += 1
        media += bool(row.get("media_extensions"))
        if counts[profile] > int(row["max_instances"]):
            found.append(Violation(gpu_id, "too many instances",
                                   f"{counts[profile]} x {profile}, at most {row['max_instances']}"))
    if compute > int(limits["compute_slices"]):
        found.append(Violation(gpu_id, "compute slices", f"{compute} used, the GPU has {limits['compute_slices']}"))
    if len(placed) > int(limits["max_instances"]):
        found.append(Violation(gpu_id, "instances", f"{len(placed)} GPU instances, at most {limits['max_instances']}"))
    if media > 1:
        found.append(Violation(gpu_id, "media extensions", f"{media} +me instances, at most one per GPU"))
    return found


def check_plan(layouts: Iterable[GpuLayout], workloads: Sequence[Workload]) -> list[Violation]:
    """Every rule an emitted MIG plan must satisfy: placement legality per GPU, one replica per instance, each
    replica in an instance with enough memory and compute, no replica placed twice or beyond its count."""
    rows = _profile_rows()
    by_name = {w.name: w for w in workloads}
    found: list[Violation] = []
    served: Counter[tuple[str, int]] = Counter()
    for layout in layouts:
        model = layout.gpu.slicing.key
        found += check_gpu(model, layout.gpu.gpu_id, [(i.profile, i.start) for i in layout.instances])
        for instance in layout.instances:
            if instance.workload is None:
                continue
            workload = by_name.get(instance.workload)
            if workload is None:
                found.append(Violation(layout.gpu.gpu_id, "unknown workload", str(instance.workload)))
                continue
            served[(workload.name, instance.replica)] += 1
            if workload.models and model not in workload.models:
                found.append(Violation(layout.gpu.gpu_id, "model", f"{workload.name} is limited to {workload.models}"))
            if instance.profile == "whole":
                memory, slices, size = layout.gpu.slicing.memory_gb, 7, "whole"
            else:
                row = rows[(model, instance.profile)]
                memory, slices, size = float(row["memory_gb"]), int(row["compute_slices"]), instance.profile.split(".")[0]
            if memory < workload.memory_gb:
                found.append(Violation(layout.gpu.gpu_id, "memory",
                                       f"{workload.name} needs {workload.memory_gb} GB, {instance.profile} has {memory}"))
            if slices < workload.min_compute_slices:
                found.append(Violation(layout.gpu.gpu_id, "compute",
                                       f"{workload.name} needs {workload.min_compute_slices} slices, {instance.profile} "
                                       f"has {slices}"))
            if workload.min_throughput and size != "whole" and workload.throughput.get(size, 0.0) < workload.min_throughput:
                found.append(Violation(layout.gpu.gpu_id, "throughput",
                                       f"{workload.name} measured {workload.throughput.get(size, 0.0)} req/s on {size}, "
                                       f"needs {workload.min_throughput}"))
            if instance.replica >= workload.replicas or instance.replica < 0:
                found.append(Violation(layout.gpu.gpu_id, "replica", f"{workload.name} replica {instance.replica} of "
                                       f"{workload.replicas}"))
    for (name, replica), times in served.items():
        if times > 1:
            found.append(Violation("fleet", "placed twice", f"{name} replica {replica} is served {times} times"))
    return found
