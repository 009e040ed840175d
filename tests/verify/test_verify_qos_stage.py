"""The verify stage `qos` (opgate.verify.qos_stage): its payload (the GPU stages' one GpuStagePayload), the spec's SLO field, the pure judgement
on measurements of the recorded shape, the shared timing path with a plain callable, and the check class run
directly (CPU: skipped with the reason; GPU: the real measurement on examples/ops/softmax.py)."""

from __future__ import annotations

import json
import random
import time

import pytest

from opgate.checks.base import CheckContext
from opgate.gpu.judge.qos import format_mode_table, judge_modes
from opgate.gpu.probes import qos_worker
from opgate.gpu.probes.qos import ModeResult, QosMeasurement
from opgate.model.results import Outcome
from opgate.verify import qos_worker as verify_qos_worker
from opgate.verify.qos_stage import VerifyQosCheck, judge_operator_qos, resolve_slo
from opgate.verify.tasks import GpuStagePayload, PayloadError
from opgate.verify.qos_worker import operator_subject
from opgate.core.spec import Operator, SpecError, TensorSpec, load_spec_file
from opgate_testing import REPO, gpu_available

SOFTMAX = REPO / "examples" / "ops" / "softmax.py"


def _payload(**changes) -> GpuStagePayload:
    fields = {"spec_file": str(SOFTMAX), "op": "softmax", "impl": "triton", "dtype": "float32", "seed": 0,
              "slo_p95_us": None}
    fields.update(changes)
    return GpuStagePayload(**fields)


def _samples(center: float, spread: float, n: int = 300, seed: int = 1) -> tuple[float, ...]:
    rng = random.Random(seed)
    return tuple(center + abs(rng.gauss(0, spread)) for _ in range(n))


def _measurement(alone: float, time_sliced: float, priority: float, mps: float | None) -> QosMeasurement:
    modes = [ModeResult("alone", _samples(alone, 5)), ModeResult("time_sliced", _samples(time_sliced, 50)),
             ModeResult("priority", _samples(priority, 10))]
    modes.append(ModeResult("mps", _samples(mps, 8)) if mps else ModeResult("mps", unavailable="no daemon"))
    return QosMeasurement("NVIDIA H200", 50.0, 50, tuple(modes), 0, None, "not measured here", 40.0,
                          "softmax triton float32 at its perf_dims")


def test_payload_round_trip_and_schema() -> None:
    """The stage sends and the check reads one payload class: what QosStage builds round-trips through JSON."""
    payload = _payload(slo_p95_us=400.0, seed=3)
    data = json.loads(json.dumps(payload.to_dict()))
    assert data["schema"] == 1 and data["kind"] == "gpu_stage"
    assert GpuStagePayload.from_dict(data) == payload
    assert GpuStagePayload.from_dict({**data, "check_id": "verify.softmax.triton.qos"}) == payload  # engine keys


@pytest.mark.parametrize("key", ["schema", "kind", "spec_file", "op", "impl", "dtype"])
def test_payload_missing_key_is_a_payload_error(key: str) -> None:
    data = _payload().to_dict()
    del data[key]
    with pytest.raises(PayloadError, match=key):
        GpuStagePayload.from_dict(data)


@pytest.mark.parametrize("change", [{"schema": 2}, {"kind": "numerics"}, {"seed": "0"}, {"slo_p95_us": -5},
                                    {"slo_p95_us": True}, {"slo_p95_us": "fast"}])
def test_payload_wrong_values_are_payload_errors(change) -> None:
    with pytest.raises(PayloadError):
        GpuStagePayload.from_dict({**_payload().to_dict(), **change})


def test_spec_slo_field() -> None:
    op = Operator("scale", reference=lambda x: x, inputs=[TensorSpec("x", ("N",))], dims={"N": [8]},
                  slo_p95_us=250)
    assert op.slo_p95_us == 250
    assert resolve_slo(_payload(), op) == (250.0, "declared in the spec: Operator('scale', slo_p95_us=250)")
    assert resolve_slo(_payload(slo_p95_us=90.0), op)[0] == 90.0  # the task's own SLO comes first
    for bad in (0, -1.0, "fast", True):
        with pytest.raises(SpecError, match="slo_p95_us"):
            Operator("scale", reference=lambda x: x, inputs=[TensorSpec("x", ("N",))], dims={"N": [8]},
                     slo_p95_us=bad)
    softmax = load_spec_file(SOFTMAX)[0]
    assert softmax.slo_p95_us is None and resolve_slo(_payload(), softmax) == (None, "")


def test_no_slo_reports_percentiles_and_says_so() -> None:
    outcome, reason, figures, _ = judge_operator_qos(_measurement(120, 2400, 300, 150), None, "")
    assert outcome is Outcome.PASSED and reason.startswith("no SLO declared")
    assert "alone 12" in reason and "time_sliced 2" in reason
    p95 = next(f for f in figures if f.name == "mps operator p95")
    assert p95.unit == "us" and p95.threshold is None


def test_slo_held_by_a_protecting_mode_passes_time_slicing_breaks() -> None:
    outcome, reason, figures, _ = judge_operator_qos(_measurement(120, 2400, 180, 150), 400.0, "the spec")
    assert outcome is Outcome.PASSED
    assert "holds under: priority, mps" in reason and "broken under: time_sliced" in reason
    p95 = next(f for f in figures if f.name == "time_sliced operator p95")
    assert p95.threshold is not None and p95.threshold.value == 400.0 and p95.threshold.comparison == "<="


def test_slo_kept_by_no_sharing_mode_warns_and_missed_alone_fails() -> None:
    outcome, reason, _, remediation = judge_operator_qos(_measurement(120, 2400, 1900, None), 400.0, "spec")
    assert outcome is Outcome.WARNED and "holds under: none" in reason and "MIG" in remediation
    outcome, reason, _, _ = judge_operator_qos(_measurement(120, 2400, 180, 150), 50.0, "spec")
    assert outcome is Outcome.FAILED and "even alone" in reason
    empty = QosMeasurement("NVIDIA H200", 0, 50, (ModeResult("alone", unavailable="worker crashed"),), 0, None,
                           "", 1.0)
    assert judge_operator_qos(empty, 400.0, "spec")[0] is Outcome.ERROR


def test_mode_table_lists_every_mode() -> None:
    verdicts, _ = judge_modes(_measurement(120, 2400, 180, None), 400.0, "spec", word="operator")
    table = format_mode_table(verdicts, 400.0)
    lines = table.splitlines()
    assert "p95 <= 400 us" in lines[0] and len(lines) == 5
    assert lines[2].startswith("time_sliced") and lines[2].endswith("BROKEN")
    assert lines[4].startswith("mps") and "not measured: no daemon" in lines[4]


def test_operator_subject_is_what_the_worker_parses() -> None:
    subject = operator_subject(str(SOFTMAX), "softmax", "triton", "float16", seed=7)
    assert subject.worker_module == "opgate.verify.qos_worker"  # the probe worker plus the operator request
    assert verify_qos_worker.qos_worker.REQUESTS["operator"] is verify_qos_worker.operator_request
    args = verify_qos_worker.build_parser().parse_args(["priority", "--samples", "5", *subject.worker_args])
    assert (args.subject, args.op, args.impl, args.dtype, args.seed) == ("operator", "softmax", "triton",
                                                                          "float16", 7)
    assert args.spec_file == str(SOFTMAX)


def test_timing_path_times_a_plain_callable() -> None:
    """The path the probe kernel and an operator share, driven by a callable that takes ~1 ms."""
    calls = []

    def submit() -> None:
        calls.append(1)
        end = time.perf_counter() + 1e-3
        while time.perf_counter() < end:
            pass

    request = qos_worker.LatencyRequest(submit, lambda: None)
    values = qos_worker.time_requests(request, samples=5, gap_ms=0.0)
    assert len(values) == 5 and all(v >= 1000.0 for v in values)
    stopped = qos_worker.time_requests(request, samples=5, gap_ms=0.0, under_load=lambda: len(calls) < 7)
    assert len(stopped) == 2  # the load ended: the caller refills and asks for the rest


def test_check_skips_without_a_gpu_with_the_reason() -> None:
    ok, _ = gpu_available()
    if ok:
        pytest.skip("a GPU is present: the skip path is not reachable here")
    result = VerifyQosCheck().run(CheckContext(verb="verify", options=_payload().to_dict()))
    assert result.outcome is Outcome.SKIPPED, result.reason
    assert result.reason.startswith("the qos stage times the implementation on a GPU:")
    assert VerifyQosCheck.levels == ("quick", "standard", "thorough")


def test_check_with_a_broken_payload_names_the_key() -> None:
    options = _payload().to_dict()
    del options["impl"]
    result = VerifyQosCheck().run(CheckContext(verb="verify", options=options))
    assert result.outcome is Outcome.ERROR and "lacks impl" in result.reason


@pytest.mark.gpu
def test_qos_stage_on_the_gpu() -> None:
    check = VerifyQosCheck()
    check.budget_s = 90.0
    result = check.run(CheckContext(verb="verify", options=_payload(slo_p95_us=2000.0).to_dict()))
    assert result.outcome in (Outcome.PASSED, Outcome.WARNED), result.reason
    assert "alone" in result.extra["percentiles_us"]
    assert result.extra["qos"]["modes"][0]["details"]["request"]["dims"] == {"M": 16384, "N": 4096}
    assert any(f.name == "alone operator p95" and f.threshold is not None for f in result.figures)


def test_the_qos_stage_is_registered_and_its_tasks_carry_a_payload_the_check_reads(tmp_path) -> None:
    """`--stages qos`: one exclusive task per GPU implementation (240 s, declared by QosStage), its payload read
    back as the GpuStagePayload VerifyQosCheck reads."""
    from opgate.verify.engine import VerifyRequest, gpu_stage_tasks, parse_stages, select

    assert "qos" in parse_stages("numerics,qos")
    request = VerifyRequest(spec_file=SOFTMAX, stages=["numerics", "qos"], budget="quick")
    [sel] = select(load_spec_file(SOFTMAX), request, None)
    tasks, _ = gpu_stage_tasks(sel, request, tmp_path)
    qos = {t.check_id: t for t in tasks if t.target.endswith("VerifyQosCheck")}
    assert set(qos) == {"verify.softmax.triton.qos", "verify.softmax.torch.qos"}
    for task in qos.values():
        payload = GpuStagePayload.from_dict(task.context.options)
        assert task.exclusive and task.timeout_s == 240.0
        assert payload.op == "softmax" and payload.dtype == "float32" and payload.slo_p95_us is None
