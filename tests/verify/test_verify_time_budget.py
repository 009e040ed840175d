"""verify/time_budget.py: a case plan fitted to a time budget at the backend's measured speed, keeping declared
cases and one case of every regime x layout before the rest."""

from __future__ import annotations

from opgate.verify.inputs import Case
from opgate.verify.time_budget import (
    MIN_CHECK_SECONDS, CasePlanFitter, CaseSize, CaseTimer, check_seconds, operator_seconds,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def case(origin: str, regime: str = "typical", layout: str = "contiguous", **dims: int) -> Case:
    return Case.make(dims, 0, regime, layout, origin)


def test_a_case_is_predicted_from_the_slowest_rate_per_element_and_per_row():
    timer = CaseTimer()
    timer.observe(CaseSize.of([(4, 128)]), 0.1)  # the cheapest call: its cost is the overhead
    timer.observe(CaseSize.of([(64, 128)]), 0.7)  # 60 more rows cost 0.6 s: 10 ms a row
    assert abs(timer.predict(CaseSize.of([(16385, 1)])) - (0.1 + 0.6 / 64 * 16385)) < 1e-9  # rows dominate
    # a single long row is predicted by elements, the larger of the two rates
    one_row = CaseSize.of([(1, 16385)])
    assert one_row.rows == 1 and timer.predict(one_row) == 0.1 + 0.6 / (64 * 128) * 16385


def fit(budget: float, cases: list[Case], sizes: list[CaseSize], seconds: dict[int, float]):
    clock = FakeClock()
    fitter = CasePlanFitter(budget, cases, sizes, clock)
    ran = []
    for index in range(len(cases)):
        if fitter.runs(index):
            clock.now += seconds[index]
            fitter.observe(index, seconds[index])
            ran.append(index)
    return ran, fitter


def test_declared_cases_always_run_and_the_expensive_added_sizes_are_capped():
    cases = [case("declared", M=4, N=128), case("declared", M=8, N=1024), case("edge", M=16385, N=128),
             case("regime", "large", M=4, N=128), case("layout", layout="transposed", M=8, N=1024),
             case("edge", M=4, N=1)]
    sizes = [CaseSize.of([(m, n)]) for m, n in ((4, 128), (8, 1024), (16385, 128), (4, 128), (8, 1024), (4, 1))]
    seconds = {0: 1.0, 1: 2.0, 2: 4000.0, 3: 1.0, 4: 2.0, 5: 1.0}
    ran, fitter = fit(20.0, cases, sizes, seconds)
    assert ran == [0, 1, 3, 4, 5]  # every declared case, each regime x layout, the cheap edge; not 16385 rows
    summary = fitter.summary()
    assert summary is not None and [c["case"] for c in summary["capped"]] == [cases[2].label()]
    assert summary["capped"][0]["predicted_s"] > 20


def test_when_time_is_short_one_case_of_each_regime_and_layout_comes_before_more_of_the_same():
    cases = [case("declared", M=4, N=64)] + [case("edge", M=4, N=n) for n in (65, 127, 129)] + [
        case("regime", "large", M=4, N=64), case("layout", layout="strided", M=4, N=64)]
    sizes = [CaseSize.of([(4, n)]) for n in (64, 65, 127, 129, 64, 64)]
    seconds = {k: 3.0 for k in range(len(cases))}
    ran, _ = fit(10.0, cases, sizes, seconds)
    assert 4 in ran and 5 in ran  # the large regime and the strided layout
    assert len(ran) == 3 or len(ran) == 4


def test_a_budget_of_zero_caps_nothing():
    cases = [case("declared", N=4), case("edge", N=1 << 20)]
    ran, fitter = fit(0.0, cases, [CaseSize.of([(4,)]), CaseSize.of([(1 << 20,)])], {0: 1.0, 1: 1e6})
    assert ran == [0, 1] and fitter.summary() is None


def test_an_operator_budget_is_shared_by_its_checks_jobs_at_a_time():
    assert operator_seconds("standard", gpu=False, given=None) == 150.0
    assert operator_seconds("quick", gpu=True, given=33.0) == 33.0
    assert check_seconds(150.0, checks=6, jobs=2) == 50.0
    assert check_seconds(150.0, checks=1, jobs=16) == 150.0
    assert check_seconds(30.0, checks=20, jobs=2) == MIN_CHECK_SECONDS
    assert check_seconds(0.0, checks=3, jobs=2) == 0.0


def test_slow_backends_take_the_larger_shares():
    # softmax's example on a CPU: 3 Triton checks (interpreter, weight 1) beside 12 eager ones (weight 0.25)
    total = 3 * 1.0 + 12 * 0.25
    assert check_seconds(150.0, checks=15, jobs=2, weight=1.0, total_weight=total) == 50.0
    assert check_seconds(150.0, checks=15, jobs=2, weight=0.25, total_weight=total) == MIN_CHECK_SECONDS


def test_on_a_gpu_a_case_costs_a_call_not_its_size():
    """fla's kernels on the H200: each new shape compiles and autotunes for seconds, the size costs microseconds; a
    size-scaled rate from those calls predicted 13251 s for a 65535-wide case and capped most of the plan."""
    timer = CaseTimer(per_call=True)
    for size, seconds in (((2, 64), 9.0), ((2, 64), 2.0), ((33, 100), 3.0), ((1, 17), 2.5), ((4, 4), 0.1)):
        timer.observe(CaseSize.of([size]), seconds)
    # the first call is left out: the upper quartile of 2.0, 3.0, 2.5, 0.1
    assert timer.predict(CaseSize.of([(1, 65535)])) == timer.predict(CaseSize.of([(4, 4)])) == 2.5
