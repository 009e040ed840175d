"""Check: measured isolation / QoS. Does a latency-sensitive probe kernel keep its SLO beside a saturating
neighbour, under time-slicing, stream priorities and MPS (neighbour capped), and does MPS's pinned-memory limit
hold? Standard level only (it saturates the GPU for several seconds); skipped without a GPU, with the reason.

The SLO: OPGATE_QOS_SLO_US (or the context option qos_slo_us) when declared, P95 of the probe in microseconds;
else data/qos_policy.toml derives it from the probe alone."""

from __future__ import annotations

import os
from typing import Any, ClassVar, Mapping

from opgate.checks.base import Check, CheckContext
from opgate.data import load_table
from opgate.errors import SkipCheck
from opgate.gpu.judge.qos import (PROTECTING_MODES, SHARING_MODES, judge_modes, latency_summary,
                                  sharing_summary)
from opgate.gpu.probes.qos import QosMeasurement
from opgate.results import CheckResult, Figure, Outcome, Threshold

__all__ = ["PROTECTING_MODES", "SHARING_MODES", "QosCheck", "judge_qos", "latency_summary", "qos_policy", "slo_for"]


def qos_policy() -> dict[str, tuple[float, str]]:
    return {row["metric"]: (float(row["value"]), row["source"]) for row in load_table("qos_policy")}


def slo_for(alone_p95_us: float, declared_us: float | None, policy: Mapping[str, tuple[float, str]]
            ) -> tuple[float, str]:
    if declared_us is not None:
        return declared_us, "declared SLO (OPGATE_QOS_SLO_US)"
    factor, source = policy["slo_factor_of_alone_p95"]
    added, _ = policy["slo_max_added_us"]
    return min(factor * alone_p95_us, alone_p95_us + added), source


def judge_qos(measurement: QosMeasurement, declared_slo_us: float | None = None
              ) -> tuple[Outcome, str, list[Figure], str]:
    """(outcome, reason, figures, remediation); pure, so recorded measurements test it on a CPU."""
    policy = qos_policy()
    alone = measurement.mode("alone")
    if alone is None or not alone.latencies_us:
        reason = alone.unavailable if alone else "the probe alone was not measured"
        return Outcome.ERROR, f"probe alone could not be measured: {reason}", [], ""
    alone_stats = latency_summary(alone.latencies_us)
    slo, slo_source = slo_for(alone_stats["p95"], declared_slo_us, policy)
    verdicts, figures = judge_modes(measurement, slo, slo_source, word="probe")
    if measurement.pinned_allocated_mb is not None:
        slack, slack_source = policy["pinned_limit_slack_mb"]
        figures.append(Figure("MPS client memory under the pinned limit", measurement.pinned_allocated_mb, "MB",
                              Threshold(measurement.pinned_limit_mb + slack, "<=", slack_source),
                              key="qos.mps_client_memory_under_the_pinned_limit"))
    enforced = (None if measurement.pinned_allocated_mb is None else
                measurement.pinned_allocated_mb <= measurement.pinned_limit_mb + policy["pinned_limit_slack_mb"][0])
    figures.append(Figure("MPS pinned-memory limit", measurement.pinned_note, key="qos.mps_pinned_memory_limit"))
    holds, breaks, protected = sharing_summary(verdicts)
    text = (f"SLO p95 <= {slo:.0f} us (alone {alone_stats['p95']:.0f} us); holds under: {', '.join(holds) or 'none'}"
            f"; broken under: {', '.join(breaks) or 'none'}")
    if enforced is False:
        text += f"; MPS pinned-memory limit NOT enforced ({measurement.pinned_note})"
    elif enforced:
        text += "; MPS pinned-memory limit enforced"
    if next(v for v in verdicts if v.mode == "alone").holds_slo is False:
        return (Outcome.FAILED, "the probe misses its SLO even alone: " + text, figures,
                "The declared SLO is below what this GPU delivers to one small kernel; relax it or measure again "
                "on an idle GPU.")
    if not protected or enforced is False:
        return (Outcome.WARNED, text, figures,
                "A saturating neighbour breaks the SLO under every sharing mode measured here: give the "
                "latency-sensitive service its own MIG instance or GPU (opgate plan mig), or cap the neighbour "
                "harder (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)." if not protected else
                "Set CUDA_MPS_PINNED_DEVICE_MEM_LIMIT in the MPS control daemon too (set_default_device_pinned_mem_limit)"
                " and check the driver: a client could take more memory than its limit.")
    return Outcome.PASSED, text, figures, ""


def _declared_slo(ctx: CheckContext) -> float | None:
    value: Any = ctx.options.get("qos_slo_us", os.environ.get("OPGATE_QOS_SLO_US"))
    if value in (None, ""):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        from opgate.errors import InputError

        raise InputError(f"OPGATE_QOS_SLO_US={value!r} is not a number; give the probe's P95 SLO in microseconds")


class QosCheck(Check):
    check_id = "doctor.qos"
    title = "Measured isolation and QoS (probe beside a saturating neighbour)"
    levels = ("standard",)
    exclusive: ClassVar[bool] = True  # it saturates the GPU on purpose: nothing else may measure meanwhile
    timeout_s = 240.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.probes.device import gpu_unavailable_reason
        from opgate.gpu.probes.qos import measure_qos

        reason = gpu_unavailable_reason()
        if reason:
            raise SkipCheck(reason)
        declared = _declared_slo(ctx)
        measurement = measure_qos(budget_s=self.timeout_s - 60.0)  # room for the MPS daemon's stop
        outcome, text, figures, remediation = judge_qos(measurement, declared)
        return self.result(outcome, text, figures, remediation=remediation,
                           extra={"qos": measurement.to_dict()})
