"""Check 6: container runtime, cgroup limits, and whether GPU isolation holds."""

from __future__ import annotations

from dataclasses import asdict

from opgate.checks.base import Check, CheckContext
from opgate.gpu.judge.container import judge_container
from opgate.model.results import CheckResult, Figure, Outcome


def _format_bytes(value: int | None) -> str:
    return "unlimited" if value is None else f"{value / 2**30:.1f} GiB"


class ContainerCheck(Check):
    check_id = "doctor.container"
    title = "Container, cgroups and GPU isolation"
    timeout_s = 30.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.probes.container import collect_container_facts
        from opgate.probes.nvml import NvmlUnavailable, is_available, nvml_session, query

        facts = collect_container_facts()
        nvml_count = None
        try:
            with nvml_session() as nv:
                count = query(nv.nvmlDeviceGetCount)
                nvml_count = int(count) if is_available(count) else None
        except NvmlUnavailable:
            pass
        outcome, findings = judge_container(facts, nvml_count)
        cg = facts.cgroup
        figures = [
            Figure("container runtime", facts.runtime, key="container.container_runtime"),
            Figure("cgroup version", cg.version, key="container.cgroup_version"),
            Figure("memory limit", _format_bytes(cg.memory_limit_bytes), key="container.memory_limit"),
            Figure("CPU limit", "unlimited" if cg.cpu_limit_cores is None else round(cg.cpu_limit_cores, 2), "cores"
                   if cg.cpu_limit_cores is not None else "", key="container.cpu_limit"),
            Figure("GPU device nodes (openable/present)",
                   f"{sum(n.openable for n in facts.gpu_nodes)}/{len(facts.gpu_nodes)}",
                   key="container.gpu_device_nodes_openable_present"),
            Figure("GPUs seen by NVML", nvml_count if nvml_count is not None else "n/a (no driver)",
                   key="container.gpus_seen_by_nvml"),
            Figure("NVIDIA_VISIBLE_DEVICES", facts.nvidia_visible_devices or "unset",
                   key="container.nvidia_visible_devices"),
            Figure("CUDA_VISIBLE_DEVICES", facts.cuda_visible_devices or "unset", key="container.cuda_visible_devices"),
        ]
        summary = (f"{facts.runtime} runtime, cgroup {cg.version}, memory {_format_bytes(cg.memory_limit_bytes)}, "
                   f"{len(facts.gpu_nodes)} GPU device node(s)")
        if not facts.gpu_nodes and nvml_count is None:
            summary += " (no NVIDIA devices: GPU isolation not applicable)"
        reason = summary if not findings else summary + "; " + "; ".join(findings)
        return self.result(
            outcome, reason, figures=figures,
            remediation="" if outcome is Outcome.PASSED else
            "Give the container only its allocated GPUs (NVIDIA container toolkit with NVIDIA_VISIBLE_DEVICES / "
            "--gpus, no --privileged, no bind-mounted /dev), and pass /dev/nvidiactl and /dev/nvidia-uvm.",
            extra={"facts": asdict(facts)},
        )
