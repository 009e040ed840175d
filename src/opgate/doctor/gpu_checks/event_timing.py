"""doctor.event_timing: CUDA event timer resolution, the launch round trip and launch queue health; one child per
GPU."""

from __future__ import annotations

from opgate.checks.base import CheckContext
from opgate.doctor.gpu_checks.base import GpuProbeCheck, band_figure, round_us
from opgate.model.results import CheckResult, Figure, Outcome


class EventTimingCheck(GpuProbeCheck):
    check_id = "doctor.event_timing"
    title = "Event timing resolution, launch round trip and launch queue health"
    device_local = True
    remediation = "Check CUDA_LAUNCH_BLOCKING, attached profilers or debuggers, and host CPU load/frequency."

    def probe(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.probes.events import measure_event_timing
        from opgate.gpu.judge.bands import judge
        from opgate.gpu.judge.references import gpu_key_for, policy_band

        m = measure_event_timing(0)
        key = gpu_key_for(m.device.name)
        resolution_band = policy_band("event_resolution_us", key)
        roundtrip_band = policy_band("event_roundtrip_us", key)
        outcomes = [judge(m.roundtrip_us.median, roundtrip_band)]
        problems: list[str] = []
        if m.timer_step_us is None:
            outcomes.append(Outcome.WARNED)
            problems.append(f"event timing told only {m.timer_step_readings} distinct durations apart among kernels "
                            "waiting 0-23 us: its step could not be found")
        else:
            outcomes.append(judge(m.timer_step_us, resolution_band))
        if not m.launch_returned_before_done:
            outcomes.append(Outcome.FAILED)
            problems.append("a launch call did not return before its kernel finished (launches are synchronous: "
                            "CUDA_LAUNCH_BLOCKING=1 or a blocking profiler?)")
        if m.spin_error_fraction > 0.05:
            outcomes.append(Outcome.WARNED)
            problems.append(f"events measured a {m.spin_requested_us:.0f} us %globaltimer wait as "
                            f"{m.spin_event_us.median:.0f} us ({m.spin_error_fraction:.0%} off)")
        depth = ("never blocked" if m.queue_depth_before_block is None
                 else f"{m.queue_depth_before_block} launches")
        figures = [
            band_figure(f"event timer step (smallest gap among {m.timer_step_readings} distinct timed durations)",
                         "not found" if m.timer_step_us is None else round(m.timer_step_us, 3), "us",
                         resolution_band, key=f"event_timing.event_timer_step_smallest_gap_among_"
                                              f"{m.timer_step_readings}_distinct_timed_durations"),
            Figure("smallest non-zero interval between back-to-back events (cost of one record)",
                   round_us(m.smallest_step_us), "us",
                   key="event_timing.smallest_non_zero_interval_between_back_to_back_events_cost_of_one_record"),
            Figure("median interval between back-to-back events", round_us(m.back_to_back_us.median), "us",
                   key="event_timing.median_interval_between_back_to_back_events"),
            Figure("back-to-back intervals reported as 0", m.zero_intervals,
                   key="event_timing.back_to_back_intervals_reported_as_0"),
            Figure(f"{m.spin_requested_us:.0f} us %globaltimer wait, timed by events", round_us(m.spin_event_us.median),
                   "us", key=f"event_timing.{m.spin_requested_us:.0f}_us_pct_globaltimer_wait_timed_by_events"),
            band_figure("launch + event round trip seen by the host (median)", round_us(m.roundtrip_us.median), "us",
                         roundtrip_band, key="event_timing.launch_event_round_trip_seen_by_the_host_median"),
            Figure("launch + event round trip p95", round_us(m.roundtrip_us.p95), "us",
                   key="event_timing.launch_event_round_trip_p95"),
            Figure("launch call while the GPU is busy", round_us(m.launch_call_us), "us",
                   key="event_timing.launch_call_while_the_gpu_is_busy"),
            Figure("launch returned before its kernel finished", m.launch_returned_before_done,
                   key="event_timing.launch_returned_before_its_kernel_finished"),
            Figure(f"launch queue depth before the host blocked (of {m.queue_probe_launches})", depth,
                   key=f"event_timing.launch_queue_depth_before_the_host_blocked_of_{m.queue_probe_launches}"),
            Figure(f"stream order of {m.chain_steps} dependent kernels", "correct" if m.chain_ok else "WRONG",
                   key=f"event_timing.stream_order_of_{m.chain_steps}_dependent_kernels"),
        ]
        step = "not found" if m.timer_step_us is None else f"{m.timer_step_us * 1e3:.0f} ns"
        reason = (f"event timer step {step} (back-to-back records {m.smallest_step_us:.2f} us apart), "
                  f"launch round trip {m.roundtrip_us.median:.1f} us "
                  f"(p95 {m.roundtrip_us.p95:.1f}), launches asynchronous, queue {depth}, stream order correct")
        return self.verdict(outcomes, figures, [reason, *problems], self.remediation, m.to_dict())
