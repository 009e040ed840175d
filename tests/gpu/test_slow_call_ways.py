"""benchmarks/slow_call_timing.py: the way before 0a4720a, which it times beside today's, is the plan time_cuda
followed then (the calls counted in that commit: 15 of a 0.2 s call, now 11). Pure: the benchmark needs a GPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from opgate.gpu.probes.timing import AfterEstimate, plan_after_estimate

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "slow_call_timing.py"


def _before() -> object:
    spec = importlib.util.spec_from_file_location("slow_call_timing_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.before_0a4720a


def test_the_way_before_warmed_up_three_times_whenever_they_fit_the_budget() -> None:
    before = _before()
    assert before(1e-4, 5, 50, 2.0) == plan_after_estimate(1e-4, 5, 50, 2.0) == AfterEstimate(3, 50, False)
    # a 0.2 s call: the first call, the estimate, 3 warm-ups and 10 timed calls before; 9 more after the estimate now
    assert before(0.2, 5, 50, 2.0) == AfterEstimate(3, 10, False)
    assert plan_after_estimate(0.2, 5, 50, 2.0) == AfterEstimate(0, 9, True)
    assert before(0.68, 5, 50, 2.0) == AfterEstimate(0, 5, False)  # 2.04 s of warm-ups do not fit
