"""Which plan a calibration process takes first: an estimate of each operator x dtype's calibration seconds.

The pool takes the costliest ready plan first, so that the longest plans overlap the rest instead of running on
alone at the end (calibrator.CalibrationPool). Its estimate was the elements of the plan's inputs (plan_cost, below), which
misses references that are slow per element: in a library run on an H100 (forty-fourth session, docs/benchmarks.md)
fla_short_conv.grad, a float64 depthwise convolution's second derivative, ranked eighth of fla's 36 operators by
elements and took 216-240 s a plan, the longest of the run; it started at 106 s, after every loss plan of its rank,
and ended the calibration at 349 s. Ordering the same 108 plans' measured durations in 8 processes: 327 s by
elements, 262 s by the estimate below, 261 s by the durations themselves.

The estimate: one float64 call of the reference, in CPU time, at a representative case (the median case by input
elements, capped at TIMING_MAX_ELEMENTS so that one call stays short), timed in the empty-case probe's child, which
imports the spec anyway (verify/empty_probe.py); each case then costs that call scaled by its elements, and no less
(a smaller case pays the same per-call work: ~25 reference calls and 20-50 reverse passes per case, calibrate.py).
A plan whose call was not timed (its probe failed) gets its elements times NOMINAL_S_PER_ELEMENT, the median of
seconds per element over the fla corpus' 36 operators on the development machine, so both kinds still rank
together. The probe times only where plans wait for a process (calibrator.Calibrator.run). OPGATE_PLAN_ORDER=elements
keeps the old order, and times nothing, for the A/B on the GPU.

The same estimates predict when each plan is written (predicted_ends), which orders the compile-ahead tasks: those
of the plans written last first (verify/compile_ahead.py).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Hashable, Mapping, Sequence, TypeVar

Plan = TypeVar("Plan", bound=Hashable)

ENV = "OPGATE_PLAN_ORDER"
BY_ELEMENTS = "elements"
# A representative case above this many input elements is replaced by the largest case under it: a float64 call of a
# matmul-like reference at 2^20 elements costs a CPU thread about a second, and the probe gates its file's plans.
TIMING_MAX_ELEMENTS = 1 << 20
# Seconds of one call per plan_cost unit, median over fla's 36 operators (0.2e-9 to 50e-9): only for ranking a plan
# whose call was not timed beside those whose call was.
NOMINAL_S_PER_ELEMENT = 2.5e-9


# A gradient twin's bound terms differentiate through its reference's own backward. On the H200 host fla's .grad
# plans took 4.5x (swiglu), 5x (rms_norm_residual), 8x (kl_div) and 20x (linear_cross_entropy) their forward's bound
# terms; the factor stays at the low end so that the gradient of a small operator does not pass a large forward.
GRADIENT_COST_FACTOR = 3.0


def plan_cost(op: Any, cases: Sequence[Any]) -> float:
    """A relative estimate of one operator x dtype's calibration cost, for ordering only: the elements of its tensor
    inputs over every case (the float64 reference and its reverse passes scale with them), three times for a
    gradient twin. Not a prediction in seconds."""
    from opgate.verify.gradients import GRAD_SUFFIX
    from opgate.verify.inputs import case_input_elements

    elements = sum(case_input_elements(op, case) for case in cases)
    return elements * (GRADIENT_COST_FACTOR if op.name.endswith(GRAD_SUFFIX) else 1.0)


def by_elements_only() -> bool:
    """Whether OPGATE_PLAN_ORDER asks for the elements-only order (and no timing)."""
    return os.environ.get(ENV, "").strip().lower() == BY_ELEMENTS


def timing_case(op: Any, cases: Sequence[Any]) -> Any | None:
    """The case whose one reference call stands for the plan: the median non-empty case by input elements, or the
    largest one under TIMING_MAX_ELEMENTS if the median is above it (None: no such case)."""
    from opgate.verify.inputs import case_input_elements

    sized = sorted(((case_input_elements(op, case), k) for k, case in enumerate(cases) if not case.is_empty))
    if not sized:
        return None
    elements, k = sized[len(sized) // 2]
    if elements > TIMING_MAX_ELEMENTS:
        under = [entry for entry in sized if entry[0] <= TIMING_MAX_ELEMENTS]
        if not under:
            return None
        elements, k = under[-1]
    return cases[k]


def estimated_seconds(op: Any, cases: Sequence[Any], call_s: float | None) -> float:
    """A relative estimate of the plan's calibration seconds (for ordering only): the timed call scaled by each
    case's elements against the timing case's, at least one call a case; without a timed call, elements-based."""
    from opgate.verify.inputs import case_input_elements

    reference = timing_case(op, cases) if call_s is not None else None
    if reference is None:
        return plan_cost(op, cases) * NOMINAL_S_PER_ELEMENT
    assert call_s is not None
    unit = max(1, case_input_elements(op, reference))
    return call_s * sum(max(1.0, case_input_elements(op, case) / unit) for case in cases if not case.is_empty)


def timing_requests(jobs: Sequence[Any]) -> Mapping[str, tuple[str, Any]]:
    """Per operator of one spec file's jobs: (dtype, case) to time in the probe child; empty where not wanted."""
    if by_elements_only():
        return {}
    requests = {}
    for job in jobs:
        case = timing_case(job.op, job.cases)
        if case is not None:
            requests[job.op.name] = (job.dtypes[0], case)
    return requests


def predicted_ends(estimates: Mapping[Plan, float], processes: int,
                   rank: Callable[[Plan], float] | None = None) -> dict[Plan, float]:
    """When each plan would be written if `processes` took them costliest first (by `rank`, else by the estimate
    itself), as the pool does, each taking as long as its estimate (relative units, like the estimates). For
    ordering only: on the H100 host 27-30 of the 30 plans written last in each of three library runs were among the
    30 this predicts last (forty-fifth session, docs/benchmarks.md)."""
    import heapq

    order = rank or estimates.__getitem__
    free = [0.0] * max(1, processes)
    ends: dict[Plan, float] = {}
    for plan in sorted(estimates, key=lambda plan: -order(plan)):
        began = heapq.heappop(free)
        ends[plan] = began + estimates[plan]
        heapq.heappush(free, ends[plan])
    return ends


def latest_plans_first(tasks: Sequence[tuple[Plan, Any]], ends: Mapping[Plan, float]) -> list[Any]:
    """`tasks` as (their plan, task), those of the plans predicted to be written last first (`ends`: plan -> its
    predicted end; a plan with none counts as written first); ties keep their order."""
    return [task for _, task in sorted(tasks, key=lambda entry: -ends.get(entry[0], 0.0))]
