"""Check: NCCL collectives across every GPU of the host (`opgate doctor --level standard --check collectives`).

One process per GPU through torch.distributed (opgate.gpu.probes.collectives), 8 B .. 4 GiB capped by free memory, judged
against the topology's band (opgate.gpu.judge.collectives, data/nvlink_bandwidth.toml). Skipped with fewer than two
GPUs, without NCCL in PyTorch, or without a driver. Runs alone (`exclusive`): it saturates every link.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, ClassVar

from opgate.checks.base import Check, CheckContext
from opgate.model.errors import SkipCheck
from opgate.model.results import CheckResult, Outcome

# The sweep stays inside the check's budget on 2-8 H200s; OPGATE_COLLECTIVES_MAX_BYTES lowers the top (scripts).
MAX_BYTES_ENV = "OPGATE_COLLECTIVES_MAX_BYTES"


def one_gpu_reason(count: int) -> str:
    return f"collectives need 2 or more GPUs; this host has {count}"


class CollectivesCheck(Check):
    check_id = "doctor.collectives"
    title = "NCCL collectives: all-reduce, all-gather, reduce-scatter, broadcast bus bandwidth"
    levels: ClassVar[tuple[str, ...]] = ("standard",)
    exclusive: ClassVar[bool] = True
    timeout_s: ClassVar[float] = 240.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.judge.collectives import judge_collectives, link_reference
        from opgate.gpu.probes.collectives import CollectiveConfig, CollectiveRunError, message_sizes, run_collectives
        from opgate.probes.nvlink import collect_links
        from opgate.probes.nvml import NvmlUnavailable

        try:
            snapshot = collect_links()
        except NvmlUnavailable as exc:
            raise SkipCheck(str(exc)) from None
        count = len(snapshot.gpus)
        if count < 2:
            raise SkipCheck(one_gpu_reason(count))
        reason, visible = _torch_nccl_missing()
        if reason:
            raise SkipCheck(reason)
        max_bytes = int(os.environ.get(MAX_BYTES_ENV, str(4 << 30)))
        # one rank per GPU this process may use (CUDA_VISIBLE_DEVICES may hide some of the host's)
        config = CollectiveConfig("nccl", visible, sizes=tuple(message_sizes(8, max_bytes)),
                                  timeout_s=self.timeout_s - 20.0)
        try:
            run = run_collectives(config)
        except CollectiveRunError as exc:
            return self.result(Outcome.ERROR, f"the collectives did not complete: {exc}",
                               remediation="Re-run with NCCL_DEBUG=WARN in the environment to see NCCL's reason; "
                                           "check that every GPU is visible and free (nvidia-smi).",
                               extra={"links": snapshot.to_dict()})
        ref = link_reference(snapshot)
        verdict = judge_collectives(run, ref)
        if visible != count:
            verdict = dataclasses.replace(verdict, reason=verdict.reason + f"; {visible} of the host's {count} GPUs "
                                          "visible to PyTorch took part (CUDA_VISIBLE_DEVICES)")
        extra: dict[str, Any] = {"run": run.to_dict(), "links": snapshot.to_dict(),
                                 "reference": {"topology": ref.topology, "per_direction_gbs": ref.per_direction_gbs,
                                               "basis": ref.basis, "source": ref.source},
                                 "method": "nccl-tests definitions (doc/PERFORMANCE.md): algbw = S/t, busbw = algbw "
                                           "x 2(n-1)/n (all-reduce), (n-1)/n (all-gather, reduce-scatter), 1 "
                                           "(broadcast); t the mean over ranks of each rank's host time per "
                                           "operation after synchronize"}
        return self.result(verdict.outcome, verdict.reason, verdict.figures, remediation=verdict.remediation,
                           extra=extra)


def _torch_nccl_missing() -> tuple[str, int]:
    """(why the collectives cannot run, or ""; the GPUs PyTorch sees)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        return (f"PyTorch is not installed ({exc}); the collectives run through torch.distributed: pip install "
                "torch"), 0
    if not dist.is_available() or not dist.is_nccl_available():
        return f"this PyTorch ({torch.__version__}) has no NCCL backend", 0
    visible = torch.cuda.device_count()
    if visible < 2:
        return one_gpu_reason(visible) + " visible to PyTorch (check CUDA_VISIBLE_DEVICES)", visible
    return "", visible
