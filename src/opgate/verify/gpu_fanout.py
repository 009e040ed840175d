"""Which GPU runs which of `opgate verify`'s GPU stage tasks on a multi-GPU host (pure; verify/engine.py
fan_out_gpu_stages applies it).

Device-local stages (runtime timing, compute-sanitizer tools, Nsight Compute, out-of-memory recovery) touch only
their own GPU, so on n GPUs they run as n queues side by side, each queue one task at a time on one GPU (the
engine then gives each task CUDA_VISIBLE_DEVICES=<its GPU>): a task that must be alone on a GPU stays alone on it.
Tasks are placed longest first on the least-loaded GPU (LPT), so the wall time is near the longest queue. Stages
that share a link (host copies, peer traffic) or that this module does not know run afterwards, one at a time:
unknown is treated as shared, the safe side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

DEVICE_LOCAL_STAGES = frozenset({"runtime", "sanitizer", "memcheck", "racecheck", "initcheck", "synccheck", "ncu",
                                 "recovery"})


@dataclass(frozen=True)
class GpuStageTask:
    task_id: str  # e.g. verify.softmax.triton.float16.runtime
    stage: str  # runtime | sanitizer | racecheck | ... | ncu | recovery
    estimate_s: float  # expected duration (the engine's timeout when nothing better is known)


@dataclass(frozen=True)
class GpuStagePlan:
    queues: Mapping[int, tuple[str, ...]]  # GPU -> task ids, run in order, one at a time, side by side across GPUs
    serial: tuple[tuple[str, int], ...]  # (task id, GPU) run one at a time after the queues
    estimate_s: float  # longest queue + the serial tasks
    env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # task id -> CUDA_VISIBLE_DEVICES

    def device_of(self, task_id: str) -> int:
        for device, queue in self.queues.items():
            if task_id in queue:
                return device
        for serial_id, device in self.serial:
            if serial_id == task_id:
                return device
        raise KeyError(task_id)


def stage_is_device_local(stage: str) -> bool:
    return stage in DEVICE_LOCAL_STAGES


def assign_gpu_stage_tasks(tasks: Sequence[GpuStageTask], devices: Sequence[int],
                           visible_ids: Sequence[str] | None = None) -> GpuStagePlan:
    """Place `tasks` on `devices` (the parent's GPU indices); `visible_ids[d]` is what CUDA_VISIBLE_DEVICES must say
    for device d (the parent's own CUDA_VISIBLE_DEVICES entries; default the indices)."""
    if not devices:
        raise ValueError("no GPU to assign the verify stages to")
    seen: set[str] = set()
    for task in tasks:
        if task.task_id in seen:
            raise ValueError(f"task {task.task_id!r} appears twice")
        seen.add(task.task_id)
        if task.estimate_s < 0:
            raise ValueError(f"task {task.task_id!r} has a negative estimate")
    ids = list(visible_ids) if visible_ids is not None else [str(d) for d in range(max(devices) + 1)]
    load = {d: 0.0 for d in devices}
    queues: dict[int, list[str]] = {d: [] for d in devices}
    local = [t for t in tasks if stage_is_device_local(t.stage)]
    # longest first; ties in the order the engine listed them (stable sort), each to the least-loaded GPU
    for task in sorted(local, key=lambda t: -t.estimate_s):
        device = min(devices, key=lambda d: (load[d], list(devices).index(d)))
        queues[device].append(task.task_id)
        load[device] += task.estimate_s
    order = {t.task_id: i for i, t in enumerate(tasks)}
    for device in queues:  # within a GPU keep the engine's order (runtime before the sanitizer, ...)
        queues[device].sort(key=lambda task_id: order[task_id])
    shared = [t for t in tasks if not stage_is_device_local(t.stage)]
    serial = tuple((t.task_id, devices[0]) for t in shared)
    estimate = max(load.values()) + sum(t.estimate_s for t in shared)
    env = {task_id: {"CUDA_VISIBLE_DEVICES": ids[device]} for device, queue in queues.items() for task_id in queue}
    env.update({task_id: {"CUDA_VISIBLE_DEVICES": ids[device]} for task_id, device in serial})
    return GpuStagePlan({d: tuple(q) for d, q in queues.items()}, serial, estimate, env)
