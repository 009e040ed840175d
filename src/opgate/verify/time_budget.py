"""Fit one implementation x dtype's case plan to a time budget, keeping the cases that cover distinct code paths.

Under Triton's CPU interpreter one case can cost 10^3-10^5 times what it costs compiled: every program instance is
emulated in Python, so a case with 16385 rows (16385 programs) took minutes where its GPU run takes microseconds.
The plan is shared by every implementation (its truths are computed once), so the numerics check fits it to its own
backend's speed as it runs:

- the cost of a case is predicted from the cases already run, conservatively: the largest of its element count, its
  row count (the element count over the last dim of its largest input: one program per row in row kernels) and,
  under Triton's interpreter, the programs a dry run of the implementation counts (verify/backends/
  interpreter_programs.py: fla_short_conv.grad's B=31, T=3, D=511 has few elements and 2,976 programs, 35 s) times
  the slowest rate seen per element / per row / per program, plus the fixed cost of a call. On a GPU the size hardly
  matters (microseconds) and a case costs what its first call compiles or autotunes for a new shape (seconds), so
  there a case is predicted at the upper quartile of the calls seen (the library corpus's fla kernels: a
  size-scaled rate from compile-bound calls predicted 13251 s for a 65535-wide case and capped 48 of 57 cases);
  a case another dtype's check of the same implementation has run is predicted at what it took there
  (verify/case_costs.py): a launch grid the size does not predict defeats the model, not the measurement;
- before each case the remaining cases are ranked: each declared size's first seed first (always run: the user
  asked for those sizes), then the cheapest case of every (regime, layout) not yet covered (at a size already run
  whole where the kind has one: its cost is measured), then the rest cheapest first, a declared size's other seeds
  among them (the same code path on other values: inputs.declared_firsts);
  a case runs if it fits, with every higher-ranked case, in the time left;
- the cases run declared first, then one of each (regime, layout), then the rest in plan order (`next_case`): a
  prediction can be far off (a size past the block caps), and what runs first is what a misprediction cannot cap;
- a case that does not fit is not run, and the result says which sizes were capped and their predicted cost.

The budget is a share of the operator's `--time-budget` (verify/engine.py: its default depends on the budget level
and on whether the checks run on a GPU). Where one thread calibrates an operator's dtypes one after another, a
dtype's checks get no more than what is left of that budget since the operator's calibration began
(after_calibration_lag), so the operator ends about a budget after it started, not a budget after its last plan.
Nothing is capped on a budget of 0.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:
    from opgate.verify.case_costs import MeasuredCost

# Seconds of numerics per operator by budget level: without a GPU (Triton's interpreter, torch on the CPU) and with
# one. The CPU figures make a default run of one operator and its gradient twin finish inside three minutes of
# process wall on a 2-core CI machine: the twin's budget starts when its calibration does, after the forward's (about
# 24 s later), and the process starts about 5 s before its report's clock. At 150 s unsloth's RoPE and its gradient
# took 176.6 s of report and 182 s of wall (docs/benchmarks.md). On a GPU the caps rarely bind and only guard against
# a runaway case.
DEFAULT_OPERATOR_SECONDS = {
    ("quick", False): 90.0, ("standard", False): 140.0, ("thorough", False): 900.0,
    ("quick", True): 120.0, ("standard", True): 240.0, ("thorough", True): 1200.0,
}
# Never less per implementation x dtype: a check needs a few cases to say anything.
MIN_CHECK_SECONDS = 15.0
# A case still running this long after its check's budget ran out is stopped where the backend allows it (Triton's
# interpreter: verify/case_watchdog.py) and reported as capped; a prediction can be 20x off there.
# OPGATE_STOP_GRACE_S overrides it (the tests' one-second grace).
STOP_GRACE_S = 10.0
STOP_GRACE_ENV = "OPGATE_STOP_GRACE_S"
# The case ranked first for each (regime, layout) no case run so far covers may run past the budget by this share of
# it, all such cases together (about ten kinds at a small declared size's cost): where a check starts late with the
# least budget (a library's later operators on CI's 2 cores), its declared sizes alone spent it, and the layout and non-finite cases that catch most defects were capped
# at sizes costing a fraction of a second (attorch's BatchNorm+ReLU and Linear passed on the CPU with 65 and 49 of
# their cases capped in 18.8 s, while their strided-parameter defects show on B = 1, C = 2, L = 2; thirty-seventh
# session).
KIND_OVERRUN_SHARE = 0.25


# Shrinking a failing case (verify/shrink.py) runs the implementation up to 40 times more. Under Triton's interpreter
# cut-cross-entropy's failing float16 gradient check spent 47 s on it, after 44 s of cases (sixty-first session):
# the shrink gets what is left of the check's budget, and never less than this. It changes no verdict, only how small
# the named failing case is (the one it ends on still fails).
SHRINK_MIN_SECONDS = 10.0


def stop_grace_s() -> float:
    import os

    try:
        return max(0.0, float(os.environ.get(STOP_GRACE_ENV, "") or STOP_GRACE_S))
    except ValueError:
        return STOP_GRACE_S


def operator_seconds(budget: str, gpu: bool, given: float | None) -> float:
    """The operator's numerics time budget: the user's --time-budget, else the default for the budget level."""
    if given is not None:
        return float(given)
    return DEFAULT_OPERATOR_SECONDS.get((budget, gpu), DEFAULT_OPERATOR_SECONDS[("standard", gpu)])


def check_seconds(operator_budget: float, checks: int, jobs: int, weight: float = 1.0,
                  total_weight: float | None = None) -> float:
    """One implementation x dtype's share: the operator's checks run `jobs` at a time, so together they get the
    budget times the slots they keep busy, shared by weight (a slow backend's case weighs 1, an eager one's 0.25:
    Backend.case_cost_weight), never less than MIN_CHECK_SECONDS. 0 means no cap. Checks of one weight run in
    ceil(checks / jobs) rounds and keep checks / rounds slots busy on average: counting all `jobs`, three dtypes on 2
    cores got 100 s each of a 150 s budget, the third ran after the first, and fla's cumsum operators took 231-251 s
    (thirtieth session). Checks of mixed weights fill each other's gaps: all `jobs`."""
    if operator_budget <= 0:
        return 0.0
    total = total_weight if total_weight is not None else float(checks)
    slots = max(1, min(jobs, checks))
    equal = math.isclose(total, max(1, checks) * weight)
    filled = max(1, checks) / math.ceil(max(1, checks) / slots) if equal else slots
    share = operator_budget * filled * weight / max(total, 1e-9)
    return max(MIN_CHECK_SECONDS, min(share, operator_budget))


# A check that starts late never gets less than this share of what it would have had.
LATE_PLAN_MIN_SHARE = 0.25


def after_calibration_lag(check_budget: float, operator_budget: float, lag_s: float) -> float:
    """A check's budget when it starts `lag_s` seconds after the operator's calibration began, where one thread
    calibrates the operator's dtypes one after another (machines under 8 CPUs): its checks start one plan apart, so
    with a full share each the operator's last check ended about a whole calibration after its budget
    (fla_linear_cross_entropy.grad on 2 cores: plans at 35, 69 and 119 s, three 100 s checks, 229-275 s in all).
    The check gets what is left of the operator's budget since its calibration began, never more than its share
    and never less than LATE_PLAN_MIN_SHARE of it (nor MIN_CHECK_SECONDS). 0 (no cap) stays 0. The check measures
    the lag when it starts (budget_at_start), not when its plan came: the third of three checks on 2 slots waits for
    a slot after its plan as long as a whole check."""
    if check_budget <= 0 or operator_budget <= 0 or lag_s <= 0:
        return check_budget
    floor = max(MIN_CHECK_SECONDS, LATE_PLAN_MIN_SHARE * check_budget)
    return min(check_budget, max(floor, operator_budget - lag_s))


def budget_at_start(time_budget_s: float, share_s: float, operator_budget_s: float, operator_began_at: float,
                    now: float) -> tuple[float, float]:
    """(a numerics check's time budget, the seconds since its operator's calibration began: 0 unless that shortened
    it). `time_budget_s` is the task's full share; where its operator calibrated in one thread
    (`operator_began_at`: the epoch seconds it began, 0 otherwise) the check takes what is left of the operator's
    budget at `now` (after_calibration_lag)."""
    if operator_began_at <= 0 or time_budget_s <= 0:
        return time_budget_s, 0.0
    lag = max(0.0, now - operator_began_at)
    budget = after_calibration_lag(share_s, operator_budget_s, lag)
    return budget, (round(lag, 1) if budget < share_s else 0.0)


@dataclass(frozen=True)
class CaseSize:
    """What a case's cost scales with: its elements, its rows (programs of a row kernel) and, under Triton's
    interpreter, the programs its kernels launch (a dry run's count, verify/backends/interpreter_programs.py; 0 where
    not counted)."""

    elements: int
    rows: int
    programs: int = 0

    @classmethod
    def of(cls, shapes: Sequence[Sequence[int]], programs: int = 0) -> "CaseSize":
        if not shapes:
            return cls(1, 1, programs)
        largest = max(shapes, key=lambda shape: math.prod(shape))
        elements = max(1, math.prod(largest))
        rows = max(1, elements // max(1, largest[-1])) if largest and largest[-1] else 1
        return cls(elements, rows, programs)


# A dry run's count of a case's programs that is off its real call's count by more than this factor (either way)
# ends the use of the counts in that check: the wrapper's launches then depend on what its kernels write. A real call
# may launch twice the dry run's: opgate calls again when an output holds NaN (verify/backends/base.py).
PROGRAMS_AGREE_FACTOR = 4.0


@dataclass
class CaseTimer:
    """Measured costs so far, and the prediction of a case's cost from them.

    The fixed cost of a call is the cheapest call seen; the cost per element (per row) comes from the case with the
    most elements (rows) seen, where the size, not the call's overhead or noise, sets the time. The first call is
    left out of the rates once another has been seen: it pays the process's first-use costs (imports, the
    interpreter's set-up, a compile), which a 128-element case turns into an absurd cost per element."""

    overhead: float = math.inf
    per_element: float = 0.0
    per_row: float = 0.0
    per_program: float = 0.0  # from the case with the most programs counted, as the other rates
    programs_trusted: bool = True  # False once a dry run's count disagreed with its real call's (CasePlanFitter)
    observed: int = 0
    per_call: bool = False  # a GPU: every case is predicted at the upper quartile of the calls seen
    _seen: list[tuple[CaseSize, float]] = field(default_factory=list)

    def observe(self, size: CaseSize, seconds: float) -> None:
        self.observed += 1
        self._seen.append((size, seconds))
        self.overhead = min(s for _, s in self._seen)
        sample = self._seen[1:] if len(self._seen) > 1 else self._seen
        by_elements = max(sample, key=lambda seen: (seen[0].elements, seen[1]))
        by_rows = max(sample, key=lambda seen: (seen[0].rows, seen[1]))
        self.per_element = max(0.0, by_elements[1] - self.overhead) / by_elements[0].elements
        self.per_row = max(0.0, by_rows[1] - self.overhead) / by_rows[0].rows
        counted = [seen for seen in sample if seen[0].programs > 0]
        if counted:
            by_programs = max(counted, key=lambda seen: (seen[0].programs, seen[1]))
            self.per_program = max(0.0, by_programs[1] - self.overhead) / by_programs[0].programs

    def predict(self, size: CaseSize) -> float:
        if not self.observed:
            return 0.0
        if self.per_call:
            calls = sorted(s for _, s in (self._seen[1:] if len(self._seen) > 1 else self._seen))
            return calls[(3 * (len(calls) - 1)) // 4]
        by_programs = self.per_program * size.programs if self.programs_trusted else 0.0
        return self.overhead + max(self.per_element * size.elements, self.per_row * size.rows, by_programs)


# Cases this check and another dtype's check must both have run before the other's costs are scaled by the pace
MIN_SHARED_CASES = 3


@dataclass
class CasePlanFitter:
    """Decides, case by case, whether the next case fits the time left (see the module docstring)."""

    budget_s: float
    cases: Sequence[Any]  # verify.inputs.Case
    sizes: Sequence[CaseSize]
    clock: Callable[[], float]
    timer: CaseTimer = field(default_factory=CaseTimer)
    capped: list[tuple[int, float]] = field(default_factory=list)  # (case index, predicted seconds)
    # Time kept for work after the cases, in calls of one case: (case index, calls). The gaming probe calls the
    # implementation about twice on a declared case after the loop (verify/gaming.py), 8 s a dtype under the
    # interpreter for fla's linear cross-entropy gradient; once that case has run, the cases leave it room.
    reserve: tuple[int, float] | None = None
    # What each case (by label) cost in this implementation's other dtypes' checks (verify/case_costs.py): a case
    # measured there is predicted at that, not by the size model
    measured_elsewhere: Callable[[], Mapping[str, "MeasuredCost"]] | None = None

    def __post_init__(self) -> None:
        from opgate.verify.inputs import declared_firsts

        self.always = declared_firsts(self.cases)  # each declared size's first seed: never capped
        self.started = self.clock()
        self.done: set[int] = set()
        self._seconds: dict[int, float] = {}
        self._labels = [case.label() for case in self.cases]
        # keyed by the others' mapping itself (CaseCostLog.others returns a new one when anything changed), held so
        # that its id cannot be reused by a later one
        self._pace_memo: tuple[int, Mapping[str, "MeasuredCost"] | None, float] = (-1, None, 1.0)
        self._near_memo: tuple[Mapping[str, "MeasuredCost"] | None, dict[int, "MeasuredCost | None"]] = (None, {})
        self.stopped_after: dict[int, float] = {}  # case index -> seconds it ran before it was stopped
        self._over_budget: set[int] = set()  # first-of-kind cases run past the budget, on its KIND_OVERRUN_SHARE
        self._runs_here: dict[CaseSize, list[tuple[bool, float]]] = {}  # per size run whole: (first call?, seconds)

    def observe(self, index: int, seconds: float, programs: int | None = None) -> None:
        """Case `index` ran whole in `seconds`; `programs`: what its call launched, counted as it ran (Triton's
        interpreter), against which its dry run's count is checked (PROGRAMS_AGREE_FACTOR)."""
        self.done.add(index)
        self._seconds[index] = seconds
        size = self.sizes[index]
        if programs is not None and size.programs > 0:
            if not size.programs / PROGRAMS_AGREE_FACTOR <= programs <= size.programs * PROGRAMS_AGREE_FACTOR:
                self.timer.programs_trusted = False
            size = dataclasses.replace(size, programs=programs)  # the rate from what ran, the NaN re-call included
        self.timer.observe(size, seconds)
        self._runs_here.setdefault(self.sizes[index], []).append((len(self.done) == 1, seconds))

    def predict(self, index: int) -> float:
        """Case `index`'s predicted seconds: the longest this check took on a case of its size, else what another
        dtype's check measured on it (or on nearly its sizes),
        times how much slower this check has run the cases both ran (at least that where it was stopped there), else
        the size model's figure (CaseTimer.predict)."""
        runs = self._runs_here.get(self.sizes[index])
        if runs:  # a case of this size ran whole in this check: its longest time, not the model's guess (the first
            # call's only while no other ran at that size: it pays the process's first-use costs, as in CaseTimer)
            later = [seconds for first, seconds in runs if not first]
            return max(later) if later else runs[0][1]
        model = self.timer.predict(self.sizes[index])
        elsewhere = self.measured_elsewhere() if self.measured_elsewhere else {}
        known = self._measured_elsewhere(index, elsewhere)
        if known is None:
            return model
        seconds = known.seconds * self._pace(elsewhere)
        return max(model, seconds) if known.stopped else seconds

    def _measured_elsewhere(self, index: int, elsewhere: Mapping[str, "MeasuredCost"]) -> "MeasuredCost | None":
        """The longest that case `index` or one of nearly its sizes (case_costs.near_dims) took in the other dtypes'
        checks: each dtype's plan draws its own fuzzed sizes, so the exact label alone missed H=65535 where H=65537
        had been stopped after 40 s."""
        from opgate.verify.case_costs import near_dims

        if self._near_memo[0] is not elsewhere:  # recomputed when the others' costs changed (a new mapping)
            self._near_memo = (elsewhere, {})
        memo = self._near_memo[1]
        if index not in memo:
            dims = self.cases[index].dims
            matches = [cost for label, cost in elsewhere.items()
                       if label == self._labels[index] or near_dims(dims, cost.dims)]
            memo[index] = max(matches, key=lambda cost: cost.seconds) if matches else None
        return memo[index]

    def _pace(self, elsewhere: Mapping[str, "MeasuredCost"]) -> float:
        """This check's seconds over the other checks' on the cases both ran whole, its first case left out (it pays
        the process's first-use costs), once there are MIN_SHARED_CASES of them; else 1. Under the interpreter the
        half-precision dtypes run slower: fla_short_conv's bfloat16 check took 1.35 times its float32 check's time
        over 52 shared cases (library file run, thirty-first session), so the float32 figures alone predicted its
        cases a quarter short."""
        # recomputed when this check or the others measured another case (a cache: it runs for every prediction)
        if self._pace_memo[0] == len(self._seconds) and self._pace_memo[1] is elsewhere:
            return self._pace_memo[2]
        mine = theirs = 0.0
        shared = 0
        first = next(iter(self._seconds), None)
        for index, seconds in self._seconds.items():
            known = elsewhere.get(self._labels[index])
            if index == first or known is None or known.stopped:
                continue
            mine, theirs, shared = mine + seconds, theirs + known.seconds, shared + 1
        pace = mine / theirs if shared >= MIN_SHARED_CASES and theirs > 0 and mine > 0 else 1.0
        self._pace_memo = (len(self._seconds), elsewhere, pace)
        return pace

    def reserved_s(self) -> float:
        """Seconds kept for the work after the cases (0 until the reserve's case has run)."""
        if self.reserve is None:
            return 0.0
        index, calls = self.reserve
        return calls * self._seconds.get(index, 0.0)

    def next_case(self, pending: Sequence[int]) -> int:
        """Which pending case runs next: a declared one, else one with an empty dimension, else the cheapest case of a
        (regime, layout) no case run so far covers, else the first in plan order. In plain plan order a case past the block caps that ran far
        longer than predicted took the whole budget before the plan reached its regimes and layouts: matmul's
        N=65535 took 15.4 s under the interpreter, the 30 s budget ran out, and the transposed case that catches a
        kernel assuming row-major b was capped (truth corpus, twenty-seventh session). After the one case of each
        kind, the plan order keeps the sizes the plan puts early (its edges and block caps) ahead of the regimes'
        repeats, as before. Without a budget the plan order stands."""
        if self.budget_s <= 0:
            return min(pending)
        essential, _ = self._ranked_parts(pending)
        return essential[0] if essential else min(pending)

    def runs(self, index: int) -> bool:
        """Whether case `index` (the next one: next_case) is run; False records it as capped. An empty case runs
        even once the budget is spent (it costs next to nothing, and stays stoppable: stop_after_s): ranked right
        after the declared sizes, it was still capped where those alone spent a late check's budget (fla_kl_div.grad's
        bfloat16 check, 18.8 s after a late start, capped V=0 at a predicted 0.0 s and passed where its other dtypes
        warned [size_limit: V = 0]: thirty-sixth session). The case ranked first for a (regime, layout) no run case
        covers may also run past the budget, on KIND_OVERRUN_SHARE of it."""
        if self.budget_s <= 0 or index in self.always or not self.timer.observed or self.cases[index].is_empty:
            return True
        pending = [k for k in range(len(self.cases)) if k not in self.done and k not in self._capped_indices()]
        essential, rest = self._ranked_parts(pending)  # ranked once: it predicts every pending case
        left = self._left_s(False)
        kind_left = self._left_s(True) if self._is_first_of_kind(index, essential) else left
        spent = 0.0
        for k in essential + rest:
            spent += self.predict(k)
            if k == index:
                if spent <= left:
                    return True
                if spent <= kind_left:  # past the budget, within the first-of-kind allowance: it uses it up
                    self._over_budget.add(index)
                    return True
                break
        self.capped.append((index, self.predict(index)))
        return False

    def shrink_deadline(self) -> float | None:
        """time.monotonic() after which shrinking starts no attempt: what is left of the budget from now, at least
        SHRINK_MIN_SECONDS; None without a budget."""
        import time

        if self.budget_s <= 0:
            return None
        return time.monotonic() + max(SHRINK_MIN_SECONDS, self._left_s(False))

    def stop_after_s(self, index: int) -> float | None:
        """Seconds case `index` may run before it is stopped: what is left of the budget, and STOP_GRACE_S. None
        (never stopped) without a budget, for a declared size's first seed (always run, as in `runs`) or for the first
        case of its regime x layout (the one case of its kind: docs/verify-engine.md) at a size this check has run
        whole. A first of its kind at a size never run is predicted by the model alone, which a kernel's launch grid
        can put 1000x low: such a case, left unstoppable, ran a 15 s check for minutes (the test of
        mispredicted_case_spec.py on a loaded 2-core machine, thirty-third session)."""
        case = self.cases[index]
        covered = {(self.cases[k].regime, self.cases[k].layout) for k in self.done}
        one_of_its_kind = (case.regime, case.layout) not in covered and self.sizes[index] in self._sizes_run_whole()
        if index in self._over_budget:  # admitted past the budget: what is left of the allowance, whatever its size
            return max(self._left_s(True), 0.0) + stop_grace_s()
        if self.budget_s <= 0 or index in self.always or one_of_its_kind:
            return None
        return max(self._left_s(False), 0.0) + stop_grace_s()

    def _left_s(self, first_of_kind: bool) -> float:
        """Seconds left of the budget for the next case; for a first of its kind, what is left of the budget (none
        once it is spent, however far the declared sizes overran it) and of KIND_OVERRUN_SHARE of it beyond, less
        what the first-of-kind cases run past the budget took."""
        left = self.budget_s - (self.clock() - self.started) - self.reserved_s()
        if not first_of_kind:
            return left
        used = sum(self._seconds.get(k, self.stopped_after.get(k, 0.0)) for k in self._over_budget)
        return max(left, 0.0) + KIND_OVERRUN_SHARE * self.budget_s - used

    def _is_first_of_kind(self, index: int, essential: Sequence[int]) -> bool:
        """Whether case `index` is the case ranked for its (regime, layout), which no case run so far covers
        (`essential`: the first part of _ranked_parts)."""
        return index in essential and index not in self.always and not self.cases[index].is_empty

    def stopped(self, index: int, seconds: float) -> None:
        """Case `index` was stopped after `seconds`: capped, and its size costs at least that from now on."""
        self.capped.append((index, self.predict(index)))
        self.stopped_after[index] = seconds
        self.timer.observe(self.sizes[index], seconds)

    def _sizes_run_whole(self) -> set[CaseSize]:
        """The sizes of the cases run whole in this check: their cost is measured, not modelled."""
        return {self.sizes[k] for k in self.done}

    def _capped_indices(self) -> set[int]:
        return {k for k, _ in self.capped}

    def _ranked(self, pending: Sequence[int]) -> list[int]:
        essential, rest = self._ranked_parts(pending)
        return essential + rest

    def _ranked_parts(self, pending: Sequence[int]) -> tuple[list[int], list[int]]:
        """(each declared size's first seed, each case with an empty dimension and, for each (regime, layout) no run case covers, its cheapest case at a
        size run whole here, else its cheapest case; the rest cheapest first). A size run whole has a measured cost;
        another's is the model's guess, which can be 1000x low where the kernel's grid does not follow the size:
        picked as the one case of its kind, such a guess ran unstopped (stop_after_s). An empty case costs next to
        nothing and reaches a path no other case does (a zero-size grid, an empty reduction); left in plan order it
        came after cases that ran longer than predicted and was capped in some runs and not in others
        (fla_kl_div.grad's V=0 case, thirty-fourth session), so the verdict depended on the machine's load."""
        declared = [k for k in pending if k in self.always]
        empty = [k for k in pending if k not in self.always and self.cases[k].is_empty]
        rest = sorted((k for k in pending if k not in self.always and k not in empty),
                      key=lambda k: (self.predict(k), k))
        covered = {(self.cases[k].regime, self.cases[k].layout) for k in self.done}
        measured = self._sizes_run_whole()
        # past a spent budget the first-of-kind allowance covers as many kinds as it can: each kind's cheapest case,
        # cheapest first, at any size (one never run is stoppable there: stop_after_s); within the budget a size run
        # whole comes first, its cost measured (attorch_leaky_relu's bfloat16 check spent the allowance on a
        # 4096-wide large-regime case and capped the two-element strided one that fails)
        spent = self.budget_s > 0 and self._left_s(False) <= 0
        measured_first = rest if spent else sorted(rest, key=lambda k: self.sizes[k] not in measured)
        first_of_kind: list[int] = []
        for k in measured_first:
            kind = (self.cases[k].regime, self.cases[k].layout)
            if kind not in covered:
                covered.add(kind)
                first_of_kind.append(k)
        return declared + empty + first_of_kind, [k for k in rest if k not in first_of_kind]

    def summary(self) -> dict[str, Any] | None:
        """What the result reports: the budget, and each capped case with its predicted cost (and, for a case stopped
        while it ran, after how long)."""
        if not self.capped:
            return None
        past = ({"run_past_budget": [self.cases[k].label() for k in sorted(self._over_budget)]}
                if self._over_budget else {})
        return {"budget_s": round(self.budget_s, 1), **past,
                "capped": [{"case": self.cases[k].label(), "predicted_s": round(p, 1),
                            **({"stopped_after_s": round(self.stopped_after[k], 1)} if k in self.stopped_after else {})}
                           for k, p in self.capped]}
