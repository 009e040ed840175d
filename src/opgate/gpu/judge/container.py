"""Pure judging of the container facts (opgate.probes.container): does GPU isolation hold, can CUDA start. No GPU:
recorded layouts test it. The doctor's `doctor.container` check (opgate.doctor.container) collects and calls it."""

from __future__ import annotations

from opgate.probes.container import ContainerFacts, parse_visible_devices
from opgate.model.results import Outcome, worst_outcome


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
