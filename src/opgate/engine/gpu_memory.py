"""What a GPU's memory holds now, by process, as NVML reports it: what the runner reads before it starts a GPU task
(WarmPool.make_gpu_room), so idle warm workers that hold the card's memory end before a task runs out of it.

On the H100 host (80 GiB) a library run of fla's and FlagGems' eight spec files ran out of GPU memory while no check
was using much: 57 processes held 75.9 GiB when its runtime measurements began, each warm worker and calibration
process a CUDA context of 0.5 GiB, 17 of them 1-6 GiB more. 56 of 174 runtime measurements failed and 3 were
reported as sizes that do not fit the GPU (thirty-ninth session, docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass
class GpuMemory:
    """One GPU's memory now: free and total bytes, and the bytes each process (by pid) uses on it."""

    free: int
    total: int
    used_by_pid: dict[int, int] = field(default_factory=dict)

    def free_share(self) -> float:
        return self.free / self.total if self.total else 1.0


def read_gpu_memory(keys: Sequence[str]) -> GpuMemory | None:
    """The memory of the GPU a task's lock keys name (NVML UUIDs; of several, the one with the least free), or None
    where NVML cannot tell (no driver, a key that is no UUID): the runner then ends no worker for memory."""
    from opgate.probes.nvml import NvmlUnavailable, is_available, nvml_session, query

    readings: list[GpuMemory] = []
    try:
        with nvml_session() as nv:
            for key in keys:
                handle = query(nv.nvmlDeviceGetHandleByUUID, key.encode())
                memory = query(nv.nvmlDeviceGetMemoryInfo, handle) if is_available(handle) else handle
                if not is_available(memory) or not getattr(memory, "total", 0):
                    return None
                listing = getattr(nv, "nvmlDeviceGetComputeRunningProcesses", None)  # an older nvidia-ml-py lacks it
                processes = query(listing, handle) if listing is not None else None
                used = ({int(p.pid): int(p.usedGpuMemory or 0) for p in processes}
                        if processes is not None and is_available(processes) else {})
                readings.append(GpuMemory(int(memory.free), int(memory.total), used))
    except NvmlUnavailable:
        return None
    return min(readings, key=GpuMemory.free_share) if readings else None


# The free share of its GPU's memory the runner wants before it starts a task there; below it, idle warm workers
# that hold memory on that GPU end, the largest holders first. A measurement (an exclusive task: timing at production
# sizes, recovery) wants half the card, as a measurement window does (engine/gpu_windows.py); any other GPU task a
# fifth. An idle worker is only a head start: one of another spec file costs its next task a new worker's imports.
TASK_FREE_SHARE = 0.2
MEASUREMENT_FREE_SHARE = 0.5
# What an idle worker is taken to hold where NVML names none of the run's processes (a container whose pids it does
# not see): a CUDA context, about 0.5 GiB on the H100 and H200 hosts.
CONTEXT_BYTES = 512 * 2**20
# A task that is no measurement reads NVML at most this often (a reading opens and closes NVML: milliseconds).
READ_EVERY_S = 2.0


def wanted_free_share(exclusive: bool, alone: bool = False) -> float:
    """The free share a task wants before it starts; `alone` (CheckTask.gpu_alone): all of it, so every idle holder
    ends."""
    if alone:
        return 1.0
    return MEASUREMENT_FREE_SHARE if exclusive else TASK_FREE_SHARE


def holders_to_end(memory: GpuMemory, idle_pids: Sequence[int], run_pids: Sequence[int],
                   wanted_share: float) -> list[int]:
    """Of the idle workers' pids (least recently used first), the ones to end so that `wanted_share` of the card is
    free: the largest holders on this GPU first. `run_pids`: every process of the run's pool, busy ones too. Where
    NVML lists processes but none of the run's (a container whose pids it does not see), each idle worker is taken
    to hold a context, in the order given; where it lists some of the run's, an idle worker it does not list holds
    nothing here."""
    short = int(wanted_share * memory.total) - memory.free
    if short <= 0 or not idle_pids:
        return []
    comparable = not memory.used_by_pid or any(pid in memory.used_by_pid for pid in run_pids)
    if comparable:
        named = [pid for pid in idle_pids if memory.used_by_pid.get(pid, 0) > 0]
        order = sorted(named, key=lambda pid: -memory.used_by_pid[pid])
        held = {pid: memory.used_by_pid[pid] for pid in named}
    else:
        order, held = list(idle_pids), {pid: CONTEXT_BYTES for pid in idle_pids}
    chosen: list[int] = []
    for pid in order:
        if short <= 0:
            break
        chosen.append(pid)
        short -= held[pid]
    return chosen
