"""verify/plan_order.py: the calibration pool's estimate of a plan's seconds, from one timed reference call."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import opgate  # noqa: E402
from opgate.verify import plan_order  # noqa: E402
from opgate.verify.inputs import Case, case_input_elements  # noqa: E402


def _op() -> opgate.Operator:
    return opgate.Operator("rowwise", reference=lambda x: x * 2, inputs=[opgate.TensorSpec("x", ("M", "N"))],
                           dims={"M": [4], "N": [8]}, dtypes=["float32"])


def _cases(*rows: int) -> list[Case]:
    return [Case.make({"M": m, "N": 1024}, k) for k, m in enumerate(rows)]


def test_the_timing_case_is_the_median_by_elements_capped_so_that_one_call_stays_short() -> None:
    op = _op()
    cases = _cases(1, 0, 64, 8, 4096)  # the empty case does not count
    assert dict(plan_order.timing_case(op, cases).dims)["M"] == 64  # 1, 8, 64, 4096: the upper median
    huge = _cases(1, 2048, 4096, 8192)  # the median (4096 x 1024 = 2^22 elements) is over the cap
    chosen = plan_order.timing_case(op, huge)
    assert dict(chosen.dims)["M"] == 1 and case_input_elements(op, chosen) <= plan_order.TIMING_MAX_ELEMENTS
    assert plan_order.timing_case(op, _cases(2048, 4096)) is None  # none under the cap: ranked by elements
    assert plan_order.timing_case(op, _cases(0)) is None


def test_each_case_costs_the_timed_call_scaled_by_its_elements_and_no_less() -> None:
    op = _op()
    cases = _cases(1, 8, 64, 512)  # the timing case is 64 rows
    # 1 and 8 rows cost one call each (the per-case work does not shrink below a call), 64 one, 512 eight
    assert plan_order.estimated_seconds(op, cases, 0.01) == pytest.approx(0.01 * (1 + 1 + 1 + 8))
    # untimed: the elements, in the same units as a timed plan's
    assert plan_order.estimated_seconds(op, cases, None) == pytest.approx(
        plan_order.plan_cost(op, cases) * plan_order.NOMINAL_S_PER_ELEMENT)


def test_the_requests_name_one_case_per_operator_unless_the_elements_order_is_asked_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    op = _op()
    jobs = [SimpleNamespace(op=op, dtypes=["float16", "float32"], cases=_cases(1, 8, 64))]
    monkeypatch.delenv(plan_order.ENV, raising=False)
    [(name, (dtype, case))] = plan_order.timing_requests(jobs).items()
    assert (name, dtype, dict(case.dims)["M"]) == ("rowwise", "float16", 8)
    monkeypatch.setenv(plan_order.ENV, "elements")
    assert plan_order.timing_requests(jobs) == {}


def test_the_predicted_ends_take_the_costliest_plan_first_onto_the_first_free_process() -> None:
    # two processes: 5 and 4 start at 0; 3 follows 4 (free at 4), 1 follows 5 (free at 5)
    ends = plan_order.predicted_ends({"a": 5.0, "b": 4.0, "c": 3.0, "d": 1.0}, 2)
    assert ends == {"a": 5.0, "b": 4.0, "c": 7.0, "d": 6.0}
    assert plan_order.predicted_ends({"a": 2.0}, 0) == {"a": 2.0}  # no process counts as one
    assert plan_order.predicted_ends({}, 4) == {}


def test_the_predicted_ends_can_rank_by_another_key_than_the_durations() -> None:
    """benchmarks/plan_order.py replays measured durations in the order of an estimate."""
    ends = plan_order.predicted_ends({"a": 5.0, "b": 4.0}, 1, rank={"a": 1.0, "b": 2.0}.__getitem__)
    assert ends == {"b": 4.0, "a": 9.0}
