"""Check: measured isolation / QoS. Does a latency-sensitive probe kernel keep its SLO beside a saturating
neighbour, under time-slicing, stream priorities and MPS (neighbour capped), and does MPS's pinned-memory limit
hold? Standard level only (it saturates the GPU for several seconds); skipped without a GPU, with the reason.

The SLO: OPGATE_QOS_SLO_US (or the context option qos_slo_us) when declared, P95 of the probe in microseconds;
else data/qos_policy.toml derives it from the probe alone. Judged by opgate.gpu.judge.qos.judge_qos."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from opgate.checks.base import Check, CheckContext
from opgate.model.errors import SkipCheck
from opgate.gpu.judge.qos import judge_qos
from opgate.model.results import CheckResult


def _declared_slo(ctx: CheckContext) -> float | None:
    value: Any = ctx.options.get("qos_slo_us", os.environ.get("OPGATE_QOS_SLO_US"))
    if value in (None, ""):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        from opgate.model.errors import InputError

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
