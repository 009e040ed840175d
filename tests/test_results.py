from __future__ import annotations

import json
import math

import pytest

from opgate.model.results import (SCHEMA_VERSION, CheckResult, ExitCode, Figure, Outcome, RunReport, Threshold,
                            exit_code_for)


def sample(outcome: Outcome) -> CheckResult:
    return CheckResult(
        check_id=f"doctor.sample_{outcome.value}", title="sample", outcome=outcome, reason=f"because {outcome.value}",
        figures=(Figure("bandwidth", 4.51, "TB/s", Threshold(4.46, ">=", "93% of datasheet 4.8 TB/s")),
                 Figure("name", "NVIDIA H200"), Figure("flag", True), Figure("missing", None),
                 Figure("odd", float("nan"))),
        remediation="do something", duration_s=0.25, extra={"nested": {"a": [1, 2]}},
    )


@pytest.mark.parametrize("outcome", list(Outcome))
def test_every_result_type_round_trips_through_json(outcome: Outcome) -> None:
    result = sample(outcome)
    decoded = CheckResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert decoded.outcome is outcome
    assert decoded.figures[0] == result.figures[0]
    assert math.isnan(decoded.figures[-1].value)
    assert decoded.extra == {"nested": {"a": [1, 2]}}
    assert decoded.to_dict() == json.loads(json.dumps(result.to_dict()))


def test_a_figure_keeps_its_positional_order_and_round_trips_its_key_and_labels() -> None:
    figure = Figure("GPU0 HBM read (opgate kernel)", 4.51, "TB/s", Threshold(4.46, ">=", "datasheet"),
                    key="hbm.read_bandwidth", labels={"gpu": "0"})
    assert (figure.name, figure.value, figure.unit, figure.threshold.value) == (
        "GPU0 HBM read (opgate kernel)", 4.51, "TB/s", 4.46)
    assert Figure.from_dict(json.loads(json.dumps(figure.to_dict()))) == figure
    assert "key" not in Figure("bandwidth", 1.0).to_dict()  # a keyless figure's dict is what it was


def test_a_result_round_trips_the_stage_and_labels_it_was_planned_with() -> None:
    result = CheckResult("verify.softmax.triton.float16", "t", Outcome.PASSED, "r", stage="numerics",
                         labels={"op": "softmax", "impl": "triton", "dtype": "float16"})
    decoded = CheckResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert decoded.stage == "numerics" and decoded.labels == result.labels
    assert decoded.with_duration(2.0).labels == result.labels
    assert "stage" not in sample(Outcome.PASSED).to_dict()
    # what the check set itself wins over what its task was planned with
    own = CheckResult("x", "t", Outcome.PASSED, "r", labels={"dtype": "float32"})
    assert own.with_identity("numerics", {"op": "o", "dtype": "float16"}).labels == {"op": "o", "dtype": "float32"}


def test_report_carries_schema_version_and_round_trips() -> None:
    report = RunReport("doctor", tuple(sample(o) for o in Outcome), "2026-11-29T00:00:00+00:00", 1.5,
                       host={"hostname": "h"}, tool_version="0.1.0")
    data = json.loads(json.dumps(report.to_dict()))
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["counts"] == {o.value: 1 for o in Outcome}
    assert RunReport.from_dict(data).to_dict() == data


def test_unknown_schema_version_is_refused() -> None:
    with pytest.raises(ValueError, match="schema version"):
        RunReport.from_dict({"schema_version": 999, "verb": "doctor", "results": [], "started_at": "", "duration_s": 0})


@pytest.mark.parametrize(
    ("outcomes", "strict", "expected"),
    [
        ([Outcome.PASSED, Outcome.SKIPPED], False, ExitCode.OK),
        ([Outcome.PASSED, Outcome.WARNED], False, ExitCode.OK),
        ([Outcome.PASSED, Outcome.WARNED], True, ExitCode.CHECK_FAILED),
        ([Outcome.FAILED, Outcome.ERROR], False, ExitCode.CHECK_FAILED),
        ([Outcome.PASSED, Outcome.ERROR], False, ExitCode.INTERNAL_ERROR),
        ([], False, ExitCode.OK),
    ],
)
def test_exit_code_rules(outcomes: list[Outcome], strict: bool, expected: ExitCode) -> None:
    assert exit_code_for([sample(o) for o in outcomes], strict) is expected
