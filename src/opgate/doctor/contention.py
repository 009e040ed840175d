"""Check: link contention on a multi-GPU host (`opgate doctor --level standard --check contention`).

Every GPU copying to the host at once (each direction) and every ordered GPU pair copying at once, against each
alone (opgate.gpu.probes.contention); judged by opgate.gpu.judge.contention (the share each GPU keeps against
alone, the spread across GPUs, the worst GPU or pair named). Skipped on fewer than two GPUs; runs alone on the host
(`exclusive`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from opgate.checks.base import CheckContext
from opgate.doctor.gpu_checks.base import GpuProbeCheck
from opgate.model.errors import SkipCheck
from opgate.gpu.judge.contention import combine_contention, judge_contention
from opgate.model.results import CheckResult, Outcome


class ContentionCheck(GpuProbeCheck):
    check_id = "doctor.contention"
    title = "Link contention: every GPU to the host at once, every GPU pair at once, against each alone"
    timeout_s: ClassVar[float] = 180.0

    def probe(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.probes.contention import measure_host_contention, measure_pair_contention
        from opgate.gpu.judge.references import policy_band

        devices = self.devices()
        if len(devices) < 2:
            raise SkipCheck(f"contention needs 2 or more GPUs; this host has {len(devices)}")
        share_band = policy_band("contention_vs_alone", None)
        spread_band = policy_band("host_contention_spread", None)
        measured = [measure_host_contention(devices, "H2D"), measure_host_contention(devices, "D2H"),
                    measure_pair_contention(devices)]
        verdicts = [judge_contention(m, share_band, spread_band) for m in measured]
        outcome, reason, figures = combine_contention(verdicts)
        extra: dict[str, Any] = {"measurements": [m.to_dict() for m in measured],
                                 "method": "alone and together by the same copy routine; per-key GB/s from its own "
                                           "CUDA events, aggregate from the host clock"}
        remediation = "" if outcome == Outcome.PASSED else (
            "GPUs that lose most when all copy at once share a PCIe switch, root port or NVLink path: check "
            "nvidia-smi topo -m, the PCIe width of each GPU (nvidia-smi -q -d PCI), and spread the host-heavy jobs "
            "over GPUs on different switches/NUMA nodes.")
        return self.result(outcome, reason, figures, remediation=remediation, extra=extra)
