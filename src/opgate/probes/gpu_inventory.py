"""Snapshot of every GPU NVML can see: plain data, judged elsewhere."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from opgate.probes.nvml import NotAvailable, is_available, nvml_session, query

# NVML clock-event ("throttle") reason bits, from nvml.h (nvmlClocksEventReason*).
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that mean the GPU is being held back by a fault or an environment limit, not by choice or idleness.
HARMFUL_THROTTLE_REASONS = {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}


@dataclass
class GpuSnapshot:
    index: int
    name: str
    uuid: str
    compute_capability: tuple[int, int] | None
    memory_total_bytes: int | None
    mig_mode: str  # "enabled" | "disabled" | "n/a"
    persistence_mode: str
    ecc_enabled: str
    ecc_uncorrected_volatile: int | None
    retired_pages_pending: str
    remapped_rows: dict[str, Any] | None
    throttle_reasons: list[str]
    pcie_gen_current: int | None
    pcie_gen_max: int | None
    pcie_width_current: int | None
    pcie_width_max: int | None
    notes: dict[str, str] = field(default_factory=dict)  # field -> why it is not available

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Inventory:
    driver_version: str
    cuda_driver_version: int | None  # e.g. 13000 for CUDA 13.0
    gpus: list[GpuSnapshot]


def _value(value: Any, notes: dict[str, str], key: str) -> Any:
    if isinstance(value, NotAvailable):
        notes[key] = value.reason
        return None
    return value


def _on_off(value: Any, notes: dict[str, str], key: str) -> str:
    value = _value(value, notes, key)
    if value is None:
        return "n/a"
    return "enabled" if int(value) == 1 else "disabled"


def collect_inventory() -> Inventory:
    """Read every GPU through NVML. Raises NvmlUnavailable when there is no driver."""
    with nvml_session() as nv:
        driver = query(nv.nvmlSystemGetDriverVersion)
        cuda = query(nv.nvmlSystemGetCudaDriverVersion)
        count = query(nv.nvmlDeviceGetCount)
        gpus = []
        for index in range(count if is_available(count) else 0):
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            notes: dict[str, str] = {}
            cc = _value(query(nv.nvmlDeviceGetCudaComputeCapability, handle), notes, "compute_capability")
            memory = _value(query(nv.nvmlDeviceGetMemoryInfo, handle), notes, "memory")
            mig = query(nv.nvmlDeviceGetMigMode, handle)
            mig_mode = _on_off(mig[0] if is_available(mig) else mig, notes, "mig_mode")
            ecc = query(nv.nvmlDeviceGetEccMode, handle)
            ecc_enabled = _on_off(ecc[0] if is_available(ecc) else ecc, notes, "ecc")
            ecc_unc = None
            if ecc_enabled == "enabled":
                ecc_unc = _value(query(nv.nvmlDeviceGetTotalEccErrors, handle,
                                       nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
                                 notes, "ecc_uncorrected_volatile")
            pending = query(nv.nvmlDeviceGetRetiredPagesPendingStatus, handle)
            retired_pending = "n/a" if not is_available(pending) else ("yes" if int(pending) else "no")
            if not is_available(pending):
                notes["retired_pages_pending"] = pending.reason
            remap = query(nv.nvmlDeviceGetRemappedRows, handle)
            remapped = None
            if is_available(remap):
                corr, unc, is_pending, failure = remap
                remapped = {"correctable": int(corr), "uncorrectable": int(unc),
                            "pending": bool(is_pending), "failure": bool(failure)}
            else:
                notes["remapped_rows"] = remap.reason
            fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
            mask = _value(query(fn, handle), notes, "throttle_reasons")
            reasons = [name for bit, name in THROTTLE_REASONS.items() if mask is not None and int(mask) & bit]
            gpus.append(GpuSnapshot(
                index=index,
                name=str(query(nv.nvmlDeviceGetName, handle)),
                uuid=str(query(nv.nvmlDeviceGetUUID, handle)),
                compute_capability=tuple(cc) if cc else None,
                memory_total_bytes=int(memory.total) if memory else None,
                mig_mode=mig_mode,
                persistence_mode=_on_off(query(nv.nvmlDeviceGetPersistenceMode, handle), notes, "persistence"),
                ecc_enabled=ecc_enabled,
                ecc_uncorrected_volatile=int(ecc_unc) if ecc_unc is not None else None,
                retired_pages_pending=retired_pending,
                remapped_rows=remapped,
                throttle_reasons=reasons,
                pcie_gen_current=_value(query(nv.nvmlDeviceGetCurrPcieLinkGeneration, handle), notes, "pcie_gen"),
                pcie_gen_max=_value(query(nv.nvmlDeviceGetMaxPcieLinkGeneration, handle), notes, "pcie_gen_max"),
                pcie_width_current=_value(query(nv.nvmlDeviceGetCurrPcieLinkWidth, handle), notes, "pcie_width"),
                pcie_width_max=_value(query(nv.nvmlDeviceGetMaxPcieLinkWidth, handle), notes, "pcie_width_max"),
                notes=notes,
            ))
        return Inventory(
            driver_version=str(driver),
            cuda_driver_version=int(cuda) if is_available(cuda) else None,
            gpus=gpus,
        )
