"""doctor.p2p: peer-to-peer bandwidth and latency between every GPU pair (the link matrix), judged by
opgate.gpu.judge.link_matrix."""

from __future__ import annotations

from opgate.checks.base import CheckContext
from opgate.doctor.gpu_checks.base import GpuProbeCheck
from opgate.model.errors import SkipCheck
from opgate.model.results import CheckResult


class P2PCheck(GpuProbeCheck):
    check_id = "doctor.p2p"
    title = "Peer-to-peer bandwidth and latency between every GPU pair"

    def probe(self, ctx: CheckContext) -> CheckResult:
        # The link matrix (issue 20): copy, SM read/write and latency per ordered pair beside NVML's topology,
        # judged in opgate.gpu.judge.link_matrix.
        from opgate.gpu.judge.link_matrix import link_matrix_verdict, unknown_links
        from opgate.gpu.probes.link_matrix import measure_link_matrix
        from opgate.gpu.judge.references import policy_band
        from opgate.probes.nvml import NvmlUnavailable
        from opgate.probes.topology import collect_topology

        devices = self.devices()
        if len(devices) < 2:
            raise SkipCheck(f"{len(devices)} GPU visible: peer-to-peer needs two or more")
        m = measure_link_matrix(devices)
        try:
            topology = collect_topology()
            links, numa = [list(row) for row in topology.links], [g.numa_node for g in topology.gpus]
        except NvmlUnavailable as exc:
            links, numa = unknown_links(len(devices), str(exc)), []
        verdict = link_matrix_verdict(m.pairs, links, numa, policy_band("p2p_pair_vs_siblings", None))
        extra = {**m.p2p.to_dict(), "link_matrix": m.to_dict(), "links": links, "numa": numa,
                 "matrix_text": verdict.matrix_text}
        return self.result(verdict.outcome, verdict.reason, verdict.figures, remediation=verdict.remediation,
                           extra=extra)
