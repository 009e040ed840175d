"""Pure judging of one GPU's NVML health flags (opgate.probes.gpu_inventory): ECC, row remapping, retired pages,
clock slowdowns, a degraded PCIe link. Recorded snapshots test it. The doctor's `doctor.gpu_inventory` check
(opgate.doctor.gpu_inventory) collects and calls it."""

from __future__ import annotations

from opgate.probes.gpu_inventory import HARMFUL_THROTTLE_REASONS, GpuSnapshot
from opgate.model.results import Outcome, worst_outcome


def judge_gpu(gpu: GpuSnapshot) -> tuple[Outcome, list[str]]:
    """Outcome and the findings for one GPU. Pure: tested on recorded snapshots."""
    findings: list[tuple[Outcome, str]] = []
    if gpu.ecc_uncorrected_volatile:
        findings.append((Outcome.FAILED, f"{gpu.ecc_uncorrected_volatile} uncorrected ECC errors since the last driver load"))
    if gpu.remapped_rows:
        if gpu.remapped_rows.get("failure"):
            findings.append((Outcome.FAILED, "row remapping failed: the GPU needs service"))
        elif gpu.remapped_rows.get("pending"):
            findings.append((Outcome.WARNED, "row remapping pending: reset the GPU to apply it"))
        if gpu.remapped_rows.get("uncorrectable", 0) > 0 and not gpu.remapped_rows.get("failure"):
            findings.append((Outcome.WARNED, f"{gpu.remapped_rows['uncorrectable']} rows remapped for uncorrectable errors"))
    if gpu.retired_pages_pending == "yes":
        findings.append((Outcome.WARNED, "retired pages pending: reset the GPU to retire them"))
    harmful = sorted(set(gpu.throttle_reasons) & HARMFUL_THROTTLE_REASONS)
    if harmful:
        findings.append((Outcome.WARNED, f"clocks held back by {', '.join(harmful)}"))
    if gpu.pcie_width_current and gpu.pcie_width_max and gpu.pcie_width_current < gpu.pcie_width_max:
        findings.append((Outcome.WARNED, f"PCIe link degraded: x{gpu.pcie_width_current} of x{gpu.pcie_width_max}"))
    if not findings:
        return Outcome.PASSED, []
    return worst_outcome([o for o, _ in findings]), [text for _, text in findings]
