"""doctor.launch_latency: kernel launch latency, eager against CUDA graph replay; one child per GPU."""

from __future__ import annotations

from opgate.checks.base import CheckContext
from opgate.doctor.gpu_checks.base import GpuProbeCheck, band_figure, round_us
from opgate.model.results import CheckResult, Figure


class LaunchLatencyCheck(GpuProbeCheck):
    check_id = "doctor.launch_latency"
    title = "Kernel launch latency: eager vs CUDA graph replay"
    device_local = True
    remediation = ("Slow launches point at a loaded or power-saving host CPU (check the CPU governor and other "
                   "processes) or at a driver in a debug/profiling mode (CUDA_LAUNCH_BLOCKING, a profiler attached).")

    def probe(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.judge.bands import judge
        from opgate.gpu.probes.launch import measure_launch_latency
        from opgate.gpu.judge.references import gpu_key_for, has_model_band, policy_band

        m = measure_launch_latency(0)
        key = gpu_key_for(m.device.name)
        ratio_band = policy_band("graph_over_eager", key)
        outcomes = [judge(m.graph_over_eager, ratio_band)]
        eager_fig = Figure("eager launch, per kernel (events around 1000 launches)", round_us(m.eager_us.median), "us",
                           key="launch_latency.eager_launch_per_kernel_events_around_1000_launches")
        graph_fig = Figure("CUDA graph replay, per kernel", round_us(m.graph_us.median), "us",
                           key="launch_latency.cuda_graph_replay_per_kernel")
        if has_model_band("eager_launch_us", key):
            band = policy_band("eager_launch_us", key)
            outcomes.append(judge(m.eager_us.median, band))
            eager_fig = band_figure(eager_fig.name, eager_fig.value, "us", band, key=eager_fig.key)
        if has_model_band("graph_launch_us", key):
            band = policy_band("graph_launch_us", key)
            outcomes.append(judge(m.graph_us.median, band))
            graph_fig = band_figure(graph_fig.name, graph_fig.value, "us", band, key=graph_fig.key)
        figures = [
            eager_fig, graph_fig,
            band_figure("graph / eager per-kernel time", round(m.graph_over_eager, 3), "x", ratio_band,
                         key="launch_latency.graph_eager_per_kernel_time"),
            Figure("host time per eager launch call", round_us(m.host_enqueue_us.median), "us",
                   key="launch_latency.host_time_per_eager_launch_call"),
            Figure("eager p95", round_us(m.eager_us.p95), "us", key="launch_latency.eager_p95"),
            Figure("graph p95", round_us(m.graph_us.p95), "us", key="launch_latency.graph_p95"),
            Figure("graph capture of 1000 launches", round(m.graph_capture_ms, 2), "ms",
                   key="launch_latency.graph_capture_of_1000_launches"),
        ]
        reason = (f"{m.device.name}: {m.eager_us.median:.2f} us per kernel launched eagerly, "
                  f"{m.graph_us.median:.2f} us per kernel replayed from a graph "
                  f"({1 / m.graph_over_eager:.1f}x less)")
        return self.verdict(outcomes, figures, [reason], self.remediation, m.to_dict())
