"""The verify stage `qos`: does an operator's implementation keep its latency SLO when it shares the GPU?

One call of the implementation at the operator's `perf_dims` is the latency-sensitive request; opgate.gpu.probes.qos
times it (submit to completion, seen from the host, p50/p95/p99) alone, beside a saturating neighbour process
(time-slicing), on the highest-priority stream with the neighbour's kernels on the lowest, and under a private
MPS control daemon with the neighbour capped by CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (when one can be started; no
compute mode or other card setting is changed). The SLO is `Operator(slo_p95_us=...)` (or the `slo_p95_us` of the
task's payload, the `GpuStagePayload` every GPU stage sends); without one the result reports the percentiles per
mode and says no SLO was declared.

Not a default stage (it saturates the GPU for tens of seconds); needs a GPU and skips with the reason elsewhere.
"""

from __future__ import annotations

from typing import Any

from opgate.checks.base import Check, CheckContext
from opgate.model.errors import InputError, SkipCheck
from opgate.model.results import CheckResult, Outcome
from opgate.verify.tasks import GpuStagePayload

QOS_BACKENDS = ("torch", "triton", "torch.compile")  # what runs on a torch stream the worker can prioritise


def resolve_slo(payload: GpuStagePayload, op: Any) -> tuple[float | None, str]:
    """(SLO p95 in us, where it comes from): the payload's, else the spec's `Operator(slo_p95_us=...)`."""
    if payload.slo_p95_us is not None:
        return float(payload.slo_p95_us), "SLO given with the qos task"
    declared = getattr(op, "slo_p95_us", None)
    if declared is not None:
        return float(declared), f"declared in the spec: Operator({op.name!r}, slo_p95_us={declared:g})"
    return None, ""


def judge_operator_qos(measurement: Any, slo_us: float | None, slo_source: str
                       ) -> tuple[Outcome, str, list[Any], str]:
    """(outcome, reason, figures, remediation) of an operator's QoS measurement; pure (CPU-testable).

    No SLO: passed, the reason gives each mode's p95 and says no SLO was declared. Alone above the SLO: failed.
    Kept by neither stream priority nor MPS: warned (the operator needs its own MIG instance or GPU)."""
    from opgate.gpu.judge.qos import judge_modes, sharing_summary

    alone = measurement.mode("alone")
    if alone is None or not alone.latencies_us:
        reason = alone.unavailable if alone else "not measured"
        return Outcome.ERROR, f"the operator alone could not be timed: {reason}", [], ""
    verdicts, figures = judge_modes(measurement, slo_us, slo_source, word="operator", key_stem="verify.qos")
    p95s = ", ".join(f"{v.mode} {v.percentiles_us['p95']:.1f}" for v in verdicts if v.samples)
    if slo_us is None:
        return (Outcome.PASSED, f"no SLO declared (Operator(slo_p95_us=...)), not judged; p95 per mode (us): {p95s}",
                figures, "")
    holds, breaks, protected = sharing_summary(verdicts)
    text = (f"SLO p95 <= {slo_us:g} us; p95 per mode (us): {p95s}; holds under: {', '.join(holds) or 'none'}; "
            f"broken under: {', '.join(breaks) or 'none'}")
    if next(v for v in verdicts if v.mode == "alone").holds_slo is False:
        return (Outcome.FAILED, "misses its SLO even alone on the GPU: " + text, figures,
                "Make the implementation faster at its perf_dims, or declare an SLO this GPU can deliver.")
    if not protected:
        return (Outcome.WARNED, text, figures,
                "Beside a saturating neighbour neither stream priority nor MPS keeps this SLO: give the operator's "
                "service its own MIG instance or GPU (opgate plan mig), or cap the neighbour harder "
                "(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE).")
    return Outcome.PASSED, text, figures, ""


class VerifyQosCheck(Check):
    """p50/p95/p99 of one implementation at its perf_dims under each sharing mode, judged against its SLO."""

    verbs = ("verify",)
    levels = ("quick", "standard", "thorough")
    budget_s: float = 150.0  # the measurement's own limit, inside the stage's timeout (QosStage.timeout_s, 240 s)
    samples: int = 300

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.probes.device import gpu_unavailable_reason

        options = dict(ctx.options)
        payload = GpuStagePayload.from_dict(options)
        reason = gpu_unavailable_reason()
        if reason:
            raise SkipCheck(f"the qos stage times the implementation on a GPU: {reason}")
        op = self._operator(payload)
        slo_us, slo_source = resolve_slo(payload, op)
        from opgate.gpu.judge.qos import judge_modes
        from opgate.gpu.probes.qos import measure_qos
        from opgate.verify.qos_worker import operator_subject

        subject = operator_subject(payload.spec_file, payload.op, payload.impl, payload.dtype, payload.seed)
        measurement = measure_qos(samples=self.samples, pinned_limit_mb=0, budget_s=self.budget_s,
                                  subject=subject)
        outcome, text, figures, remediation = judge_operator_qos(measurement, slo_us, slo_source)
        dims = op.timing_dims()
        verdicts, _ = judge_modes(measurement, slo_us, slo_source, word="operator")
        extra = {"payload": payload.to_dict(), "dims": dims, "slo_p95_us": slo_us, "slo_source": slo_source,
                 "qos": measurement.to_dict(),
                 "percentiles_us": {v.mode: v.percentiles_us for v in verdicts if v.samples},
                 "slo_holds": {v.mode: v.holds_slo for v in verdicts if v.holds_slo is not None}}
        label = ",".join(f"{k}={v}" for k, v in dims.items())
        return self.result(outcome, f"{payload.op} {payload.impl} {payload.dtype} at {label} on "
                           f"{measurement.device}: {text}", figures, remediation=remediation, extra=extra,
                           labels={"dims": label} if label else {})

    @staticmethod
    def _operator(payload: GpuStagePayload) -> Any:
        """The payload's operator, its implementation checked; InputError naming what does not exist."""
        from opgate.core.spec import load_spec_file

        ops = {op.name: op for op in load_spec_file(payload.spec_file)}
        op = ops.get(payload.op)
        if op is None:
            raise InputError(f"qos stage: spec file {payload.spec_file} defines no operator {payload.op!r} "
                             f"(it defines {', '.join(ops)})")
        implementation = op.implementations.get(payload.impl)
        if implementation is None:
            raise InputError(f"qos stage: operator {payload.op!r} has no implementation {payload.impl!r} "
                             f"(it has {', '.join(op.implementations) or 'none'})")
        if implementation.backend not in QOS_BACKENDS:
            raise InputError(f"qos stage: implementation {payload.impl!r} runs on {implementation.backend}; the "
                             f"stage times {', '.join(QOS_BACKENDS)} implementations on a torch stream")
        if payload.dtype not in op.dtypes:
            raise InputError(f"qos stage: operator {payload.op!r} does not declare dtype {payload.dtype!r} "
                             f"(it declares {', '.join(op.dtypes)})")
        return op
