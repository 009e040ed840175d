"""Who holds a GPU's memory right now: this process, and the others NVML sees (a snapshot, judged elsewhere).

Taken when an implementation runs out of memory during a numerics case: opgate.gpu.judge.oom decides from it
whether the implementation's own demand or another process's memory (another `opgate verify` run's recovery stage
filling the card, a training job on a shared CI GPU) made the allocation fail. torch is passed in by the caller.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class ProcessMemory:
    pid: int
    used_bytes: int | None  # None: NVML does not report it (some containers, MIG without privileges)


@dataclass(frozen=True)
class DeviceMemorySnapshot:
    """One device's memory as this process sees it (cudaMemGetInfo) and as NVML sees its processes."""

    device: int  # torch's index in this process
    free_bytes: int
    total_bytes: int
    own_bytes: int  # what this process's allocators hold: torch reserved + CuPy's pools (not the context itself)
    own_detail: str  # "torch 1.2 GiB reserved, CuPy pool 0.0 GiB"
    other_processes: tuple[ProcessMemory, ...] = ()  # NVML's compute processes on this device, this pid left out
    others_note: str = ""  # why NVML's list is missing or partial ('' when read)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "free_bytes": self.free_bytes, "total_bytes": self.total_bytes,
                "own_bytes": self.own_bytes, "own_detail": self.own_detail,
                "other_processes": [{"pid": p.pid, "used_bytes": p.used_bytes} for p in self.other_processes],
                "others_note": self.others_note}


def free_cached_memory(torch: Any) -> None:
    """Give back what this process's allocators cache but no tensor uses (PyTorch's caching allocator, CuPy's
    pools): before a case is retried after an out-of-memory error."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    free_cupy_pools()


def free_cupy_pools() -> None:
    """Give back the blocks CuPy's default pools keep, where the implementation imported CuPy (it is never
    initialised here)."""
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            cupy.get_default_memory_pool().free_all_blocks()
            cupy.get_default_pinned_memory_pool().free_all_blocks()
        except Exception:  # a CuPy without a usable device: it holds nothing to free
            pass


def held_by_this_process(torch: Any) -> int:
    """What this process's allocators (torch's, CuPy's pool) hold on the current device now; 0 before it made a
    CUDA context. Read when a check begins: in a warm worker an earlier check's leftovers are no demand of this
    check's, and its out-of-memory judges (opgate.gpu.judge.oom, the runtime stage) count them as held elsewhere."""
    if not torch.cuda.is_initialized():
        return 0
    return _own_bytes(torch, torch.cuda.current_device())[0]


def wait_for_free_memory(torch: Any, wanted_bytes: int, limit_s: float, poll_s: float = 0.5,
                         between: Callable[[], None] = lambda: None) -> bool:
    """Whether `wanted_bytes` of the current device became free: polls cudaMemGetInfo every `poll_s` for at most
    `limit_s`, calling `between` at each poll (a pause point: the waiting task uses no GPU). For work that ran out
    of memory beside other processes of its run, whose memory comes and goes in seconds."""
    began = time.monotonic()
    while True:
        free, _ = torch.cuda.mem_get_info()
        waited = time.monotonic() - began
        if free >= wanted_bytes:
            return True
        if waited >= limit_s:
            return False
        between()
        time.sleep(min(poll_s, max(0.0, limit_s - waited)))


def _own_bytes(torch: Any, device: int) -> tuple[int, str]:
    reserved = int(torch.cuda.memory_reserved(device))
    parts, total = [f"torch {reserved / 2**30:.2f} GiB reserved"], reserved
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            pool = int(cupy.get_default_memory_pool().total_bytes())
        except Exception:
            pool = 0
        total += pool
        parts.append(f"CuPy pool {pool / 2**30:.2f} GiB")
    return total, ", ".join(parts)


def _nvml_handle(pynvml: Any, torch: Any, device: int) -> Any:
    """NVML's handle of torch's device `device`: by UUID, else by PCI bus id (NVML counts every GPU of the host,
    CUDA only the visible ones, so the indices differ)."""
    from opgate.gpu.probes.device import GpuUnavailable, nvml_handle_for

    props = torch.cuda.get_device_properties(device)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}")
        except pynvml.NVMLError:
            pass
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        raise GpuUnavailable("torch reports neither the device's UUID nor its PCI bus id")
    domain, slot = int(getattr(props, "pci_domain_id", 0)), int(getattr(props, "pci_device_id", 0))
    return nvml_handle_for(pynvml, f"{domain:04x}:{int(bus):02x}:{slot:02x}.0")


def _other_processes(torch: Any, device: int) -> tuple[tuple[ProcessMemory, ...], str]:
    from opgate.gpu.probes.device import GpuUnavailable
    from opgate.probes.nvml import NvmlUnavailable, nvml_session

    try:
        with nvml_session() as pynvml:
            handle = _nvml_handle(pynvml, torch, device)
            running = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            mine = os.getpid()
            # NVML reports host pids; inside a container this process may be listed under another pid
            others = tuple(ProcessMemory(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory))
                           for p in running if int(p.pid) != mine)
            note = "" if any(int(p.pid) == mine for p in running) or not running else (
                "this process is not among NVML's pids (a container's pid namespace?): the list may include it")
            return others, note
    except (NvmlUnavailable, GpuUnavailable) as exc:
        return (), f"NVML: {exc}"
    except Exception as exc:  # an NVML call this driver lacks: the snapshot still has cudaMemGetInfo's figures
        return (), f"NVML: {type(exc).__name__}: {exc}"


def device_memory_snapshot(torch: Any, device: int | None = None) -> DeviceMemorySnapshot | None:
    """The current device's memory now; None when this process has no CUDA device (nothing to measure)."""
    if not torch.cuda.is_available():
        return None
    device = torch.cuda.current_device() if device is None else device
    free, total = torch.cuda.mem_get_info(device)
    own, detail = _own_bytes(torch, device)
    others, note = _other_processes(torch, device)
    return DeviceMemorySnapshot(device, int(free), int(total), own, detail, others, note)
