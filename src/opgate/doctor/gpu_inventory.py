"""Check 1: every GPU NVML can see, and the health flags an operator owner must know about."""

from __future__ import annotations

from opgate.checks.base import Check, CheckContext
from opgate.model.errors import SkipCheck
from opgate.gpu.judge.gpu_health import judge_gpu
from opgate.probes.gpu_inventory import GpuSnapshot
from opgate.model.results import CheckResult, Figure, Outcome, gpu_labels, worst_outcome

NVML_SOURCE = "NVML API reference, https://docs.nvidia.com/deploy/nvml-api/"


def gpu_figures(gpu: GpuSnapshot) -> list[Figure]:
    prefix = f"GPU{gpu.index}"
    labels = gpu_labels(gpu.index, gpu.uuid)
    cc = ".".join(map(str, gpu.compute_capability)) if gpu.compute_capability else "n/a"
    memory = round(gpu.memory_total_bytes / 2**30, 1) if gpu.memory_total_bytes else None
    pcie_gen = f"{gpu.pcie_gen_current}/{gpu.pcie_gen_max}" if gpu.pcie_gen_current else "n/a"
    pcie_width = f"x{gpu.pcie_width_current}/x{gpu.pcie_width_max}" if gpu.pcie_width_current else "n/a"
    return [
        Figure(f"{prefix} name", gpu.name, key="gpu.name", labels=labels),
        Figure(f"{prefix} compute capability", cc, key="gpu.compute_capability", labels=labels),
        Figure(f"{prefix} memory", memory, "GiB", key="gpu.memory", labels=labels),
        Figure(f"{prefix} MIG mode", gpu.mig_mode, key="gpu_inventory.mig_mode", labels=labels),
        Figure(f"{prefix} persistence mode", gpu.persistence_mode, key="gpu_inventory.persistence_mode",
               labels=labels),
        Figure(f"{prefix} ECC", gpu.ecc_enabled, key="gpu_inventory.ecc", labels=labels),
        Figure(f"{prefix} PCIe generation (current/max)", pcie_gen,
               "" if not gpu.pcie_gen_current else "gen", key="gpu_inventory.pcie_generation_current_max",
               labels=labels),
        Figure(f"{prefix} PCIe width (current/max)", pcie_width, key="gpu_inventory.pcie_width_current_max",
               labels=labels),
        Figure(f"{prefix} clock event reasons", ", ".join(gpu.throttle_reasons) or "none",
               key="gpu_inventory.clock_event_reasons", labels=labels),
    ]


class GpuInventoryCheck(Check):
    check_id = "doctor.gpu_inventory"
    title = "GPU inventory and health"
    timeout_s = 30.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.probes.gpu_inventory import collect_inventory
        from opgate.probes.nvml import NvmlUnavailable

        try:
            inventory = collect_inventory()
        except NvmlUnavailable as exc:
            raise SkipCheck(str(exc)) from None
        # the host's figures, on a one-GPU host labelled with that GPU as its single-GPU probes' figures are
        host = gpu_labels(inventory.gpus[0].index, inventory.gpus[0].uuid) if len(inventory.gpus) == 1 else {}
        figures = [Figure("driver version", inventory.driver_version, key="gpu_inventory.driver_version", labels=host),
                   Figure("GPUs visible", len(inventory.gpus), key="gpu_inventory.gpus_visible", labels=host)]
        if not inventory.gpus:
            return self.failed("the NVIDIA driver is loaded but NVML sees no GPU", figures=figures,
                               remediation="Check that GPUs are allocated to this container "
                                           "(NVIDIA_VISIBLE_DEVICES, --gpus) and that nvidia-smi lists them.")
        outcomes, findings = [], []
        for gpu in inventory.gpus:
            outcome, texts = judge_gpu(gpu)
            outcomes.append(outcome)
            findings += [f"GPU{gpu.index}: {t}" for t in texts]
            figures += gpu_figures(gpu)
        outcome = worst_outcome(outcomes)
        names = sorted({g.name for g in inventory.gpus})
        summary = f"{len(inventory.gpus)} GPU(s): {', '.join(names)}; driver {inventory.driver_version}"
        reason = summary if not findings else f"{summary}; " + "; ".join(findings)
        return self.result(
            outcome, reason, figures=figures,
            remediation="" if outcome is Outcome.PASSED else
            "Drain the node and reset the affected GPU (nvidia-smi -r, by an administrator) or send it for service; "
            "see NVIDIA's GPU memory error management guide.",
            extra={"gpus": [g.to_dict() for g in inventory.gpus], "source": NVML_SOURCE},
        )
