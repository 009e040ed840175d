"""Per-GPU fan-out of device-local doctor probes: on a host with several GPUs, one child process per GPU, side by
side, each seeing only its GPU (CUDA_VISIBLE_DEVICES), merged into one result with every figure prefixed GPU<i>.

Device-local probes (launch latency, stream priority, event timing) measure one GPU and its own launch path, so
GPUs do not disturb each other; probes that share a link (host links, P2P, contention, collectives) keep running
serially in one process. HBM and L2 already measure every GPU at once from threads of one process
(GpuProbeCheck.measure_each). Children are opgate's ordinary check workers (opgate.engine.runner), so a crash or hang of
one GPU's probe is that GPU's `error`, not the run's.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

from opgate.checks.base import CheckContext
from opgate.model.results import CheckResult, Figure, worst_outcome
from opgate.engine.runner import CheckTask

# Set in each per-GPU child: the GPU index (as the parent counted them) that child measures. A child never fans
# out again.
FANOUT_GPU_ENV = "OPGATE_FANOUT_GPU"


def in_fanout_child() -> bool:
    return bool(os.environ.get(FANOUT_GPU_ENV))


def visible_device_ids(count: int, cuda_visible_devices: str | None) -> list[str]:
    """What to put in each child's CUDA_VISIBLE_DEVICES for the parent's devices 0..count-1: the parent's own
    CUDA_VISIBLE_DEVICES entries when it has them (indices, UUIDs or MIG ids), else the indices."""
    if cuda_visible_devices:
        entries = [e.strip() for e in cuda_visible_devices.split(",") if e.strip()]
        if len(entries) >= count:
            return entries[:count]
    return [str(i) for i in range(count)]


def fanout_tasks(check_id: str, title: str, target: str, timeout_s: float, ctx: CheckContext,
                 devices: Sequence[int], parent_env: Mapping[str, str] | None = None) -> list[CheckTask]:
    """One runner task per GPU, not exclusive (they run side by side), each seeing only its GPU."""
    env = os.environ if parent_env is None else parent_env
    ids = visible_device_ids(max(devices) + 1 if devices else 0, env.get("CUDA_VISIBLE_DEVICES"))
    return [CheckTask(check_id=f"{check_id}@GPU{d}", title=f"{title} (GPU{d})", target=target, timeout_s=timeout_s,
                      context=ctx, env={"CUDA_VISIBLE_DEVICES": ids[d], FANOUT_GPU_ENV: str(d)}, exclusive=False)
            for d in devices]


def merge_per_gpu(check_id: str, title: str, per_gpu: Sequence[tuple[int, CheckResult]]) -> CheckResult:
    """One result from the per-GPU children: the worst outcome, reasons joined per GPU, every figure prefixed
    in its name and labelled with its GPU."""

    figures: list[Figure] = []
    reasons, remediations = [], []
    for device, result in per_gpu:
        figures += [Figure(f"GPU{device} {f.name}", f.value, f.unit, f.threshold, f.key,
                           {**result.labels, **f.labels, "gpu": str(device)}) for f in result.figures]
        reasons.append(f"GPU{device}: {result.reason}")
        if result.remediation and result.remediation not in remediations:
            remediations.append(result.remediation)
    outcome = worst_outcome([r.outcome for _, r in per_gpu])
    extra = {"fan_out": "one child process per GPU, side by side (CUDA_VISIBLE_DEVICES)",
             "per_gpu": [{"gpu": d, "outcome": r.outcome.value, "duration_s": r.duration_s, "extra": r.extra}
                         for d, r in per_gpu]}
    return CheckResult(check_id=check_id, title=title, outcome=outcome, reason="; ".join(reasons),
                       figures=tuple(figures), remediation=" ".join(remediations), extra=extra)


def run_per_gpu(check_id: str, title: str, target: str, timeout_s: float, ctx: CheckContext,
                devices: Sequence[int]) -> CheckResult:
    """Run the check `target` once per GPU in `devices`, all at once, and merge."""
    from opgate.engine.runner import run_checks

    tasks = fanout_tasks(check_id, title, target, timeout_s, ctx, devices)
    results = run_checks(tasks, jobs=len(tasks))
    return merge_per_gpu(check_id, title, list(zip(devices, results)))
