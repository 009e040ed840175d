"""Check: GPU <-> NUMA node <-> NIC affinity and the GPU-GPU link matrix (facts `opgate plan` places by).

Warns when the platform cannot say which NUMA node a GPU is on (placement cannot be NUMA-aware), or when GPUs sit
on a NUMA node without a NIC while NICs exist (their network traffic crosses the CPU interconnect)."""

from __future__ import annotations

from opgate.checks.base import Check, CheckContext
from opgate.model.errors import SkipCheck
from opgate.gpu.judge.topology import judge_topology
from opgate.model.results import CheckResult


class TopologyCheck(Check):
    check_id = "doctor.topology"
    title = "GPU, NUMA and NIC topology"
    timeout_s = 30.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.probes.nvml import NvmlUnavailable
        from opgate.probes.topology import collect_topology

        try:
            snapshot = collect_topology()
        except NvmlUnavailable as exc:
            raise SkipCheck(str(exc)) from None
        if not snapshot.gpus:
            raise SkipCheck("NVML reports no GPU")
        outcome, reason, figures, remediation = judge_topology(snapshot)
        return self.result(outcome, reason, figures, remediation=remediation,
                           extra={"topology": snapshot.to_dict()})
