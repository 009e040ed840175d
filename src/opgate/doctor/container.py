"""Check 6: container runtime, cgroup limits, and whether GPU isolation holds."""

from __future__ import annotations

from dataclasses import asdict

from opgate.checks.base import Check, CheckContext
from opgate.probes.container import ContainerFacts, parse_visible_devices
from opgate.results import CheckResult, Figure, Outcome, worst_outcome


def judge_container(facts: ContainerFacts, nvml_gpu_count: int | None) -> tuple[Outcome, list[str]]:
    """Pure judgement, tested on recorded layouts. `nvml_gpu_count` is None when NVML is unavailable."""
    findings: list[tuple[Outcome, str]] = []
    openable = [n for n in facts.gpu_nodes if n.openable]
    allocated = parse_visible_devices(facts.nvidia_visible_devices)
    uses_mig = bool(allocated) and any(a.startswith("MIG-") for a in allocated or [])
    if allocated is not None and not uses_mig:
        if len(openable) > len(allocated):
            findings.append((Outcome.FAILED, f"the process can open {len(openable)} GPU device nodes but "
                             f"NVIDIA_VISIBLE_DEVICES allocates {len(allocated)}: isolation escape risk"))
        if nvml_gpu_count is not None and nvml_gpu_count > len(allocated):
            findings.append((Outcome.FAILED, f"NVML sees {nvml_gpu_count} GPUs but NVIDIA_VISIBLE_DEVICES "
                             f"allocates {len(allocated)}: isolation escape risk"))
        if allocated and not facts.gpu_nodes and nvml_gpu_count is None:
            findings.append((Outcome.WARNED, "NVIDIA_VISIBLE_DEVICES allocates GPUs but no /dev/nvidiaN node exists"))
    cuda_mask = parse_visible_devices(facts.cuda_visible_devices)
    if cuda_mask is not None and nvml_gpu_count is not None and nvml_gpu_count > len(cuda_mask):
        findings.append((Outcome.WARNED, f"CUDA_VISIBLE_DEVICES shows {len(cuda_mask)} of {nvml_gpu_count} GPUs: "
                         "a soft mask only, the other GPUs stay reachable"))
    has_gpus = bool(facts.gpu_nodes) or bool(nvml_gpu_count)
    if has_gpus:
        ctl = facts.control_nodes.get("nvidiactl")
        if ctl is None:
            findings.append((Outcome.FAILED, "/dev/nvidiactl is missing: no CUDA program can start"))
        elif not ctl.openable:
            findings.append((Outcome.FAILED, f"/dev/nvidiactl cannot be opened ({ctl.error}), mode {ctl.mode}"))
        uvm = facts.control_nodes.get("nvidia-uvm")
        if uvm is None:
            findings.append((Outcome.WARNED, "/dev/nvidia-uvm is missing: CUDA needs it (nvidia-modprobe -u -c=0 "
                             "creates it on a host; the container runtime must pass it in)"))
        elif not uvm.openable:
            findings.append((Outcome.FAILED, f"/dev/nvidia-uvm cannot be opened ({uvm.error}), mode {uvm.mode}"))
        for node in facts.gpu_nodes:
            if not node.openable and allocated is None:
                findings.append((Outcome.WARNED, f"{node.path} cannot be opened ({node.error})"))
        if facts.dev_char_missing and facts.runtime == "none":
            findings.append((Outcome.WARNED, f"no /dev/char symlinks for {', '.join(facts.dev_char_missing)}: "
                             "a systemd daemon-reload can cut running containers off their GPUs "
                             "(run `nvidia-ctk system create-dev-char-symlinks --create-all`)"))
    if not findings:
        return Outcome.PASSED, []
    return worst_outcome([o for o, _ in findings]), [t for _, t in findings]


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
