"""Which physical GPU a CUDA device index of this process is: the UUID NVML gives it.

Two processes on one host name the same card differently (CUDA_VISIBLE_DEVICES=1 in one, =0,1 in another), so a
host-wide lock per GPU (opgate.engine.gpu_guard) is keyed by the card's UUID. NVML counts every GPU of the host in PCI bus
order; CUDA counts the visible ones, in CUDA_VISIBLE_DEVICES order, each entry an NVML index, a UUID (or a unique
prefix of one) or a MIG instance's UUID. Where the mapping is uncertain (CUDA's default FASTEST_FIRST order on a host
with different GPU models, where an index need not be NVML's), every candidate is returned: a lock on all of them is
safe, a lock on the wrong one is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from opgate.probes.nvml import NotAvailable, NvmlUnavailable, is_available, nvml_session, query


@dataclass(frozen=True)
class PhysicalGpu:
    index: int  # NVML's
    uuid: str  # "GPU-..."
    name: str
    mig_uuids: tuple[str, ...] = ()  # "MIG-..." of its MIG instances


def physical_gpus() -> list[PhysicalGpu] | NotAvailable:
    """Every GPU NVML sees, in its order; NotAvailable with the reason when NVML cannot tell."""
    try:
        with nvml_session() as nv:
            count = query(nv.nvmlDeviceGetCount)
            if not is_available(count):
                return NotAvailable(f"NVML cannot count the GPUs: {count.reason}")
            gpus = []
            for index in range(int(count)):
                handle = query(nv.nvmlDeviceGetHandleByIndex, index)
                uuid = query(nv.nvmlDeviceGetUUID, handle) if is_available(handle) else handle
                if not is_available(uuid):
                    return NotAvailable(f"NVML gives GPU {index} no UUID: {uuid.reason}")
                gpus.append(PhysicalGpu(index, str(uuid), str(query(nv.nvmlDeviceGetName, handle)),
                                        _mig_uuids(nv, handle)))
            return gpus
    except NvmlUnavailable as exc:
        return NotAvailable(str(exc))


def _mig_uuids(nv: Any, handle: Any) -> tuple[str, ...]:
    """The UUIDs of the GPU's MIG instances (none without MIG, or with an nvidia-ml-py that lacks the calls)."""
    count_of, instance_of = (getattr(nv, "nvmlDeviceGetMaxMigDeviceCount", None),
                             getattr(nv, "nvmlDeviceGetMigDeviceHandleByIndex", None))
    count = query(count_of, handle) if count_of is not None else NotAvailable("no MIG calls")
    if not is_available(count) or instance_of is None:
        return ()
    uuids = []
    for slot in range(int(count)):
        mig = query(instance_of, handle, slot)
        uuid = query(nv.nvmlDeviceGetUUID, mig) if is_available(mig) else mig
        if is_available(uuid):
            uuids.append(str(uuid))
    return tuple(uuids)


def _entry_gpu(entry: str, gpus: Sequence[PhysicalGpu]) -> PhysicalGpu | None:
    """The physical GPU a CUDA_VISIBLE_DEVICES entry names (its MIG instance's parent for a MIG UUID)."""
    if entry.isdigit():
        return next((g for g in gpus if g.index == int(entry)), None)
    matches = [g for g in gpus if g.uuid.startswith(entry) or any(m.startswith(entry) for m in g.mig_uuids)]
    return matches[0] if len(matches) == 1 else None


def candidate_uuids(device: int, visible: str | None, gpus: Sequence[PhysicalGpu],
                    pci_bus_order: bool) -> tuple[str, ...]:
    """The UUIDs CUDA device `device` of a process with CUDA_VISIBLE_DEVICES=`visible` (None: unset) may be:
    one when certain, several when not, none when the entry names no GPU NVML sees."""
    if visible is None:
        chosen = list(gpus)
    else:
        # CUDA stops at the first entry it cannot use: the devices after it are not visible
        chosen = []
        for entry in (e.strip() for e in visible.split(",")):
            gpu = _entry_gpu(entry, gpus) if entry else None
            if gpu is None:
                break
            chosen.append(gpu)
    if device >= len(chosen):
        return ()
    by_uuid = visible is not None and not any(e.strip().isdigit() for e in visible.split(",") if e.strip())
    if by_uuid or pci_bus_order or len({g.name for g in gpus}) == 1:
        return (chosen[device].uuid,)
    # CUDA's default FASTEST_FIRST order on mixed models: an index (in CUDA_VISIBLE_DEVICES too) need not be NVML's
    return tuple(sorted(g.uuid for g in gpus))
