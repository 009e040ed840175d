"""doctor.stream_priority: does the highest stream priority keep a short kernel's latency under a saturated GPU;
one child per GPU."""

from __future__ import annotations

from opgate.checks.base import CheckContext
from opgate.doctor.gpu_checks.base import GpuProbeCheck, band_figure, round_us
from opgate.model.errors import SkipCheck
from opgate.model.results import CheckResult, Figure


class StreamPriorityCheck(GpuProbeCheck):
    check_id = "doctor.stream_priority"
    title = "Stream priority under a saturated GPU"
    device_local = True
    remediation = ("Priority did not help: check that no MPS server or time-slicing configuration flattens priorities, "
                   "and that the latency-critical work really runs on a stream created with the greatest priority.")

    def probe(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.judge.bands import judge
        from opgate.gpu.probes.priority import measure_stream_priority
        from opgate.gpu.judge.references import gpu_key_for, policy_band

        m = measure_stream_priority(0)
        if not m.supported:
            raise SkipCheck(f"{m.device.name} reports no stream priorities (range {m.greatest_priority}.."
                            f"{m.least_priority} from {m.range_source})")
        assert m.high_us is not None and m.equal_us is not None and m.idle_us is not None
        band = policy_band("priority_over_equal", gpu_key_for(m.device.name))
        ratio = m.high_over_equal
        outcome = judge(ratio, band)
        figures = [
            Figure("priority range (greatest..least)", f"{m.greatest_priority}..{m.least_priority}",
                   key="stream_priority.priority_range_greatest_least"),
            Figure("probe latency, idle GPU", round_us(m.idle_us.median), "us",
                   key="stream_priority.probe_latency_idle_gpu"),
            Figure("probe latency, highest priority, GPU saturated", round_us(m.high_us.median), "us",
                   key="stream_priority.probe_latency_highest_priority_gpu_saturated"),
            Figure("probe latency, equal priority, GPU saturated", round_us(m.equal_us.median), "us",
                   key="stream_priority.probe_latency_equal_priority_gpu_saturated"),
            band_figure("highest / equal priority latency", round(ratio, 3), "x", band,
                         key="stream_priority.highest_equal_priority_latency"),
            Figure("one low-priority hog kernel alone", round(m.hog_kernel_ms, 3), "ms",
                   key="stream_priority.one_low_priority_hog_kernel_alone"),
            Figure("highest priority p95", round_us(m.high_us.p95), "us", key="stream_priority.highest_priority_p95"),
            Figure("equal priority p95", round_us(m.equal_us.p95), "us", key="stream_priority.equal_priority_p95"),
        ]
        reason = (f"short kernel under saturation: {m.high_us.median:.1f} us on the highest-priority stream vs "
                  f"{m.equal_us.median:.1f} us at equal priority ({ratio:.2f}x; idle {m.idle_us.median:.1f} us)")
        return self.verdict([outcome], figures, [reason], self.remediation, m.to_dict())
