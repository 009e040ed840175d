"""Documented deviations and failure classes: what a FAIL means, and what is not a failure at all.

A verdict is `failed` only when the implementation is wrong. Three things that differ from the float64 truth are
legitimate production choices or limits, and are reported as `warned` with what they mean:

* flush-to-zero (`ftz`): CuPy compiles every kernel with -ftz=true and --use_fast_math builds do the same; such a
  kernel returns 0 where float32 values are subnormal. Detected by judging the case again against the truth of
  the flushed inputs with the flushed output, plus an allowance for intermediates flushed inside a reduction.
  `Operator(subnormals="exact")` makes it a failure.
* a range limit (`range_limit`): an implementation that breaks only at magnitudes far outside what the input's kind
  promises (a float32 layer norm whose x^2 overflows at 1e19). The breaking magnitude is bisected; inside the
  promised range (softmax without max-subtraction breaks at logits of ~89) it is a `range` failure.
* a known interpreter limitation (`interpreter`): a bfloat16 result of Triton's CPU interpreter where the backend
  reports arithmetic it could not make exact, or a case that raised on a construct the interpreter cannot run
  (backends/triton_interpreter_gaps.py); the GPU run decides.
* an unsupported size (`size_limit`): the implementation raises (cleanly) only on sizes opgate added above every
  declared size, for the size's sake: not with an error a smaller case fails with too, nor on a non-contiguous case
  whose contiguous twin of the same sizes passed (check._size_limited).
* an unsupported layout (`layout_limit`): the implementation refuses a non-contiguous layout opgate chose with an
  error that names it ("must be contiguous", a stride check) while contiguous cases run; a wrong answer or any other
  error on such a layout stays a `layout` (or `crash`) failure. TensorSpec(contiguous=True) declares the need.

Cases whose truth is undefined (a NaN converted to an integer, undefined in C and in PyTorch) are not judged and
are counted (`undefined_masks`). A `precision` failure carries a finding (`precision_finding`): its factor over
eager, where its failing cases concentrate and the likely cause.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from opgate.core import dtypes as dt
from opgate.verify.inputs import Case, make_inputs
from opgate.core.spec import Operator

FAILURE_CLASSES = ("typical", "tail", "layout", "range", "nonfinite", "precision", "unwritten", "crash", "gaming",
                   "stream", "gradient", "memory", "structure")
DEVIATION_CLASSES = ("ftz", "range_limit", "interpreter", "size_limit", "layout_limit", "undefined", "output_dtype")
FLUSH_THRESHOLD = 2.0**-126  # float32's smallest normal: what -ftz=true flushes (float16 maths does not flush)
FTZ_DTYPES = ("float32", "bfloat16")  # dtypes whose values a float32 FTZ kernel can see as subnormal
BISECT_STEPS = 14  # log-space bisection of the breaking magnitude: a factor of ~1.4 at the end
# Inputs whose every value is below this are outside what any kind promises (1e-20: far below any activation,
# gradient or logit a model produces, far above float32's subnormals); a break only below it is a range limit.
PROMISED_MIN_MAGNITUDE = 1e-20


@dataclass(frozen=True)
class Deviation:
    kind: str  # one of DEVIATION_CLASSES
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"class": self.kind, "detail": self.detail}


def has_subnormals(values: Sequence[Any]) -> bool:
    import torch

    for value in values:
        if isinstance(value, torch.Tensor) and value.dtype.is_floating_point and value.numel():
            v = value.to(torch.float64).abs()
            if bool(((v > 0) & (v < FLUSH_THRESHOLD)).any()):
                return True
    return False


def flushed(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
        return torch.where(value.abs() < FLUSH_THRESHOLD, torch.zeros_like(value), value)
    return value


def ftz_truth(op: Operator, case: Case, dtype: str) -> list[Any] | None:
    """The float64 truth of the case's inputs with subnormals flushed, the outputs flushed too; None when the
    case has no subnormal input or output to flush (then FTZ cannot explain a failure)."""
    import torch

    from opgate.verify.calibrate import as_outputs

    if dtype not in FTZ_DTYPES:
        return None
    generated = make_inputs(op, case, dtype)
    with torch.no_grad():
        truth = as_outputs(op.reference(*generated.truth))
    if not has_subnormals(generated.truth) and not has_subnormals(truth):
        return None
    with torch.no_grad():
        flushed_truth = as_outputs(op.reference(*[flushed(v) for v in generated.truth]))
    return [flushed(t.detach().cpu()) for t in flushed_truth]


def ftz_allowance(fan_in: int) -> float:
    """Intermediates of a reduction of n terms may each be flushed: at most (n + 1) x the threshold."""
    return (max(fan_in, 1) + 1) * FLUSH_THRESHOLD


def undefined_masks(op: Operator, case: Case, dtype: str, out_dtypes: Sequence[str],
                    truths: Sequence[Any] | None = None) -> list[Any] | None:
    """Per output, the elements whose truth is undefined, not judged:

    - at a size opgate added (not declared), a float truth that is NaN although every input is finite: an empty
      reduction or a 0/0 (the mean of an empty batch, the unbiased variance of one element). No user wrote a
      contract for the mean of nothing; the reference's NaN there is one convention among several (0 is another);
    - per integer output, elements that depend on a non-finite input (their truth is a NaN/Inf converted to an
      integer), found by substituting two different finite values for the non-finite inputs."""
    import torch

    from opgate.verify.calibrate import as_outputs

    added = _undefined_at_added_size(op, case, dtype, truths)
    if added is not None:
        return added
    if case.regime not in ("nonfinite", "masked") or all(dt.is_float(d) for d in out_dtypes):
        return None
    generated = make_inputs(op, case, dtype)

    def substituted(fill: float) -> list[Any]:
        return [torch.where(torch.isfinite(v), v, torch.full_like(v, fill))
                if isinstance(v, torch.Tensor) and v.dtype.is_floating_point else v for v in generated.truth]

    try:
        with torch.no_grad():
            low = as_outputs(op.reference(*substituted(0.0)))
            high = as_outputs(op.reference(*substituted(1.0e6)))
    except Exception:
        return None
    masks: list[Any] = []
    for out_dtype, a, b in zip(out_dtypes, low, high):
        if dt.is_float(out_dtype) or not isinstance(a, torch.Tensor) or a.shape != b.shape:
            masks.append(None)
        else:
            masks.append(a != b)
    return masks if any(m is not None and bool(m.any()) for m in masks) else None


def _undefined_at_added_size(op: Operator, case: Case, dtype: str, truths: Sequence[Any] | None) -> list[Any] | None:
    """NaN truths from finite inputs at a size opgate added (see undefined_masks), or None."""
    import torch

    if truths is None or case.origin == "declared" or case.regime in ("nonfinite", "masked"):
        return None
    masks = [t.isnan() if isinstance(t, torch.Tensor) and t.dtype.is_floating_point else None for t in truths]
    if not any(m is not None and bool(m.any()) for m in masks):
        return None
    generated = make_inputs(op, case, dtype)
    if not all(bool(torch.isfinite(v).all()) for v in generated.truth
               if isinstance(v, torch.Tensor) and v.dtype.is_floating_point):
        return None
    return masks


# bisect_breaking_scale's answer when the scaled values pass even at `far`: the break needs the failing case's own
# value pattern (fla's group norm overflows on one group of a `huge` case at 1.7e37, not on typical values scaled
# to 2.3e37). Then it is a range limit only when the bulk of the failing cases' inputs (their median |x|) lies
# outside the promise: a naive log(1 + e^x) fails a `large` case of max |x| 2e4 on its ordinary values (blind corpus)
NOT_REPRODUCED = math.inf


def bisect_breaking_scale(fails: Callable[[float], bool], near: float, far: float,
                          steps: int = BISECT_STEPS) -> float | None:
    """The scale between `near` (passes) and `far` (fails), in log space, closest to `near` at which `fails`
    turns true; `far` may lie above `near` (overflow) or below it (underflow). None if it fails at `near`
    already (not a range effect); NOT_REPRODUCED if it passes at `far`."""
    if fails(near):
        return None
    if not fails(far):
        return NOT_REPRODUCED
    good, bad = math.log(near), math.log(far)
    for _ in range(steps):
        mid = (good + bad) / 2
        if fails(math.exp(mid)):
            bad = mid
        else:
            good = mid
    return math.exp(bad)


def promised_magnitude(op: Operator, dtype: str) -> float:
    """The smallest promise among the op's float inputs (capped by the dtype's range): where a break becomes a bug."""
    promises = [spec.promised_magnitude() for spec in op.tensor_inputs
                if (spec.dtype is None or dt.is_float(spec.dtype)) and spec.promised_magnitude() is not None]
    limit = dt.max_finite(dtype) / 64 if dt.is_float(dtype) else math.inf
    return min([*(p for p in promises if p is not None), limit])


def input_magnitude(op: Operator, case: Case, dtype: str, typical: bool = False) -> float:
    """max |x| over the case's finite float inputs; with `typical`, the largest of their median |x| instead: where
    the bulk of an input lies (a case with a few large values can fail on its ordinary ones)."""
    import torch

    generated = make_inputs(op, case, dtype)
    largest = 0.0
    for value in generated.truth:
        if isinstance(value, torch.Tensor) and value.dtype.is_floating_point and value.numel():
            finite = value[torch.isfinite(value)].abs()
            if finite.numel():
                largest = max(largest, float(finite.median() if typical else finite.max()))
    return largest


NONFINITE_REGIMES = ("nonfinite", "masked")
MAGNITUDE_REGIMES = ("large", "huge", "magnitude", "mixed", "peaked")
# A failing case whose error stays within this share of the output's RMS is a rounding problem (a float16 or
# bfloat16 intermediate, a cancellation), not a wrong formula: 2^-7, two bfloat16 roundings. With PRECISION_RATIO:
# a logsumexp that drops a 1024-column tile at N = 8192 is 1% low, 34x its budget: a wrong formula (blind corpus);
# float16 atomics of a split row sum drift 10.8x their budget on constant rows: a rounding. Re-judged offline on
# the 113 failed results of the eighth session's CPU and H200 corpus runs, only the former changed class.
PRECISION_RELATIVE_RMSE = 2.0**-7
PRECISION_RATIO = 20.0  # over budget by less than this everywhere: a rounding, not a wrong formula
# Integer and quantized outputs: a rounding problem flips the elements next to a rounding boundary only; a rule
# that differs on more than this share of them (round half up for negatives: half of them) is a wrong formula.
PRECISION_MISMATCH_SHARE = 0.1

Failing = Sequence[tuple[Case, Sequence[str], Sequence[Any]]]  # (case, reasons, per-output OutputStats)


def classify_failure(failing: Failing, declared: Mapping[str, Sequence[int]]) -> str:
    """The failure class from which cases fail and why (see FAILURE_CLASSES)."""
    reasons = [r for _, rs, _ in failing for r in rs]
    if reasons and all(any(r.startswith("raised") for r in rs) for _, rs, _ in failing):
        return "crash"
    if reasons and all(any(r.startswith("returned ") and "where the reference returns" in r for r in rs)
                       for _, rs, _ in failing):
        return "structure"  # the output's form (one tensor or a tuple) is not the reference's
    if any("never written" in r for r in reasons):
        return "unwritten"
    # NaN/Inf handling (a NaN or Inf input case whose only fault is the NaN/Inf) is the class only when nothing
    # else fails: a value error elsewhere says more about the implementation
    values = [f for f in failing if not (f[0].regime in NONFINITE_REGIMES and all(_nonfinite_reason(r) for r in f[1]))]
    if not values:
        return "nonfinite"
    failing = values
    reasons = [r for _, rs, _ in failing for r in rs]
    cases = [c for c, _, _ in failing]
    plain = [f for f in failing if f[0].regime == "typical" and f[0].layout == "contiguous"]
    if not plain:
        if all(c.layout != "contiguous" for c in cases):
            return "layout"
        if all(c.regime in MAGNITUDE_REGIMES for c in cases):
            if any(_nonfinite_reason(r) for _, rs, _ in failing for r in rs):
                return "range"  # an overflow inside the promised range
            return "precision" if _precision_sized(failing) else "range"
    elif all(_beyond_declared(f[0], declared) for f in plain):
        # opgate's own sizes only: a tail, unless every one lies above the declared sizes and fails by a rounding
        # error (float16 atomics of a split row sum, off at 1000 and 1023 columns, 1.0-1.2x their budget)
        if all(_above_declared(f[0], declared) for f in plain) and _small_errors(plain) and _few_mismatches(plain):
            return "precision"
        return "tail"
    else:  # typical inputs at declared sizes fail: judge by what those cases say
        if any(_nonfinite_reason(r) for _, rs, _ in plain for r in rs):
            return "nonfinite"
        return "precision" if _precision_sized(plain) else "typical"
    if any(_nonfinite_reason(r) for r in reasons):
        return "nonfinite"
    return "precision" if _precision_sized(failing) else "typical"


def _nonfinite_reason(reason: str) -> bool:
    return "NaN/Inf" in reason or "truth is NaN" in reason


def _above_declared(case: Case, declared: Mapping[str, Sequence[int]]) -> bool:
    """Some dim lies above every declared size (where a longer accumulation costs more rounding)."""
    return any(dim in declared and declared[dim] and size > max(declared[dim]) for dim, size in case.dims)


def _precision_sized(failing: Failing) -> bool:
    """A rounding problem: every failing case within PRECISION_RATIO x its budget, or its error within
    PRECISION_RELATIVE_RMSE of the output's RMS; and no integer output that differs on many elements."""
    return _few_mismatches(failing) and (_small_errors(failing) or _relatively_small(failing))


def _few_mismatches(failing: Failing) -> bool:
    return all(stat.exact_mismatches <= PRECISION_MISMATCH_SHARE * stat.numel
               for _, _, stats in failing for stat in stats if stat.numel)


def _relatively_small(failing: Failing) -> bool:
    for _, _, stats in failing:
        if not stats or any(s.problem or s.nonfinite_unexpected or s.nonfinite_missed or s.unwritten for s in stats):
            return False
        if any(s.rmse > PRECISION_RELATIVE_RMSE * s.truth_rms for s in stats):
            return False
    return True


def _beyond_declared(case: Case, declared: Mapping[str, Sequence[int]]) -> bool:
    """An opgate-added size: some dim is not one of its declared sizes (edge, big or shrunk)."""
    return any(dim in declared and size not in declared[dim] for dim, size in case.dims)


def _small_errors(failing: Failing) -> bool:
    """Over-budget but within PRECISION_RATIO x of it everywhere: an accumulation-precision problem."""
    import re

    ratios = []
    for _, reasons, _ in failing:
        for reason in reasons:
            match = re.search(r"([0-9.eE+-]+) > budget ([0-9.eE+-]+)", reason)
            if match:
                value, budget = float(match.group(1)), float(match.group(2))
                ratios.append(value / budget if budget > 0 else math.inf)
    return bool(ratios) and max(ratios) < PRECISION_RATIO


# --- Precision findings: how far from eager, where, and the likely cause -------------------------------------------
#
# A [precision] failure is a true finding about accuracy against PyTorch eager, not a wrong formula: a reviewer may
# accept it knowingly or fix it. Its line therefore says by how much the implementation misses eager's own error in
# the same case, where in the plan the failing cases concentrate, and what likely costs the digits.

LOW_PRECISION_DTYPES = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
# Where failing cases concentrate, in words (constant rows and ties make a softmax's rows near-uniform: every
# y_j ~ 1/N, where a low-precision sum of dy * y loses the most against the row's values).
REGIME_WORDS = {
    "constant_rows": "near-uniform rows (constant rows)", "ties": "near-uniform rows (tied values)",
    "tiny": "tiny values", "peaked": "peaked rows (one dominant entry)", "large": "large magnitudes",
    "huge": "magnitudes near the dtype's range", "mixed": "rows mixing 1e8 with O(1) values",
    "masked": "masked rows", "nonfinite": "rows with NaN/Inf", "typical": "typical values",
    "magnitude": "scaled magnitudes",
}
MAX_FLOAT32_RERUNS = 3  # failing cases run again in float32 (the worst of each regime first)
# A failing case whose error in float32 is this many times smaller than in its dtype fails by the dtype's rounding
# even where float32 misses the budget too (eager exact there: a loss that must cancel to 0). float16's epsilon is
# 8192x float32's and bfloat16's 65536x, but float32's own accumulation stays: a target logit from bfloat16 products
# over 16385 equal terms (tests/data/verify/precision_spec.py, constant rows) fell only 39x. A wrong mask or formula
# does not shrink at all (its error is the same in each dtype).
FLOAT32_SHRINK = 16.0
ELEMENTWISE_CAUSE = "an elementwise formula that loses digits eager keeps"
ELEMENTWISE_REMEDY = ("a precision deficit against PyTorch eager, not a wrong formula: rewrite where it cancels "
                      "(log1p(exp(-|x|)) for log(1 + exp(-|x|)), expm1(x) for exp(x) - 1, sigmoid(-x) for "
                      "1 - sigmoid(x)) or use the exact function instead of an approximate one, or accept it knowingly")


ROUNDING_MISMATCH_CAUSE = "where eager's roundings cancel"
ROUNDING_MISMATCH_REMEDY = (
    "a precision deficit against PyTorch eager, not a wrong formula: eager is exact in the failing cases and the "
    "error falls with the dtype's precision, so two values that should cancel are rounded differently (e.g. one "
    "side of a difference from products rounded to the input dtype, the other from a float32 dot); form both from "
    "the same float32 values, or accept it knowingly")


def shrinks_in_float32(narrow: Sequence[Any], wide: Sequence[Any]) -> bool:
    """Whether every output's largest and RMS error in float32 (`wide`, OutputStats) are FLOAT32_SHRINK times or
    more below its own in the narrow dtype (`narrow`): whatever still fails is a share of the narrow dtype's rounding.
    The largest error, not a quantile: a componentwise failure can rest on one element. An output with no error in
    the narrow dtype has nothing to shrink. False where an output is not comparable, or float32 gives NaN/Inf or
    unwritten elements (no rounding explains those)."""
    if not narrow or len(narrow) != len(wide):
        return False
    for low, high in zip(narrow, wide):
        if low.problem or high.problem or high.nonfinite_unexpected or high.nonfinite_missed or high.unwritten:
            return False
        if high.max_abs > 0 and (high.max_abs * FLOAT32_SHRINK > low.max_abs or high.rmse * FLOAT32_SHRINK > low.rmse):
            return False
    return True


def numeric_failure(reasons: Sequence[str]) -> bool:
    """Every reason is a figure over its budget (RMSE, p99.9, a sampled element): no NaN/Inf, unwritten element,
    exception, wrong shape or differing integers, which no rounding explains."""
    return bool(reasons) and all("> budget" in r and not _nonfinite_reason(r) for r in reasons)


@dataclass(frozen=True)
class PrecisionFinding:
    """What a [precision] failure says beside its class (collected by check.py, rendered by `text`)."""

    failing: int
    cases: int
    factor_over_eager: float  # the worst case's figure / eager's same figure there (inf: eager is exact)
    factor_note: str  # "" (the worst case's factor) or "median over the failing cases" (eager exact in the worst)
    figure: str  # "RMSE" | "p99.9 |error|": which figure that factor compares ("sampled elements": only those fail)
    budget_ratio: float  # that figure / its budget
    relative_rmse: float  # RMSE / RMS(truth) there
    concentrated: tuple[tuple[str, int, int], ...]  # (regime, failing, planned), highest failure rate first
    above_declared_only: bool  # every failing case has a dim above its declared sizes
    cause: str
    float32_rerun: str  # "passes" | "fails" | "raised <error>" | "" (not tried: the dtype is float32 or wider)

    def text(self) -> str:
        if self.figure == "sampled elements":
            return (f"rounding, not a wrong formula: sampled elements up to {self.budget_ratio:.3g}x their own bound, "
                    f"the RMSE and p99.9 within budget{self._where()}; {self.cause}")
        if not math.isfinite(self.factor_over_eager):
            factor = f"eager is exact in the failing cases ({self.budget_ratio:.3g}x the budget"
        elif self.factor_note:
            factor = (f"{self.figure} {self.factor_over_eager:.3g}x eager's error in the same case ({self.factor_note}; "
                      f"the worst case {self.budget_ratio:.3g}x its budget")
        else:
            factor = (f"{self.figure} {self.factor_over_eager:.3g}x eager's error in the same case "
                      f"({self.budget_ratio:.3g}x its budget")
        relative = (f", RMSE {self.relative_rmse:.2g} of the output's RMS" if math.isfinite(self.relative_rmse)
                    else ", where the truth is 0")
        return f"rounding, not a wrong formula: {factor}{relative}){self._where()}; {self.cause}"

    def remedy(self) -> str:
        """What to do about it, by the likely cause this finding names."""
        if ELEMENTWISE_CAUSE in self.cause:
            return ELEMENTWISE_REMEDY
        if ROUNDING_MISMATCH_CAUSE in self.cause:
            return ROUNDING_MISMATCH_REMEDY
        from opgate.verify.calibrate import K_QUANTILE, K_RMSE

        return ("a precision deficit against PyTorch eager, not a wrong formula: accumulate reductions in float32 "
                "(tl.sum(x.to(tl.float32)), or dtype=tl.float32) and round once at the end, or accept it knowingly; "
                f"budgets: {K_RMSE:g}x/{K_QUANTILE:g}x the eager baseline (docs/verify-method.md)")

    def _where(self) -> str:
        if self.above_declared_only:
            return "; only at sizes above the declared ones"
        if not self.concentrated:
            return ""
        rates = [(regime, f / n if n else 1.0) for regime, f, n in self.concentrated]
        top = rates[0][1]
        counts = ", ".join(f"{regime} {f}/{n}" for regime, f, n in self.concentrated)
        if top >= 0.5 and any(rate < top / 2 for _, rate in rates) or len(rates) == 1:
            lead = [REGIME_WORDS.get(regime, regime) for regime, rate in rates if rate >= top / 2]
            words = ", ".join(dict.fromkeys(w.split(" (")[0] for w in lead))
            return f"; concentrated in {words} ({counts} cases)"
        return f"; spread over the plan ({counts} cases)"

    def to_dict(self) -> dict[str, Any]:
        return {"failing": self.failing, "cases": self.cases,
                "factor_over_eager": self.factor_over_eager if math.isfinite(self.factor_over_eager) else "inf",
                "factor_note": self.factor_note, "figure": self.figure, "budget_ratio": self.budget_ratio,
                "relative_rmse": self.relative_rmse if math.isfinite(self.relative_rmse) else "inf",
                "concentrated": [list(c) for c in self.concentrated], "above_declared_only": self.above_declared_only,
                "cause": self.cause, "float32_rerun": self.float32_rerun}


def precision_finding(failing: Sequence[tuple[Case, Any]], planned: Sequence[Case], dtype: str,
                      out_dtypes: Sequence[str], declared: Mapping[str, Sequence[int]],
                      float32_rerun: str) -> PrecisionFinding:
    """The finding of a precision failure from its failing cases (case, CaseVerdict), the plan, and whether the same
    implementation given the same values in float32 passes these cases (check.py runs it). The factor over eager is
    that of the RMSE or p99.9 furthest over its budget in any failing case (against eager's same figure there); where
    eager is exact in that case, the median over the failing figures where it is not."""

    def over_budget(verdict: Any) -> list[tuple[float, str, float, float]]:
        """(budget ratio, figure, factor over eager, RMSE / RMS(truth)) of every RMSE / p99.9 over its budget."""
        found = []
        for stats, budget in zip(verdict.stats, verdict.budgets):
            if budget.is_override or not math.isfinite(budget.rmse):
                continue
            relative = stats.rmse / stats.truth_rms if stats.truth_rms > 0 else math.inf if stats.rmse > 0 else 0.0
            for name, value, allowed, eager in (("RMSE", stats.rmse, budget.rmse, budget.baseline_rmse),
                                                ("p99.9 |error|", stats.quantile_abs, budget.quantile,
                                                 budget.baseline_quantile)):
                if value > allowed:
                    found.append((value / allowed if allowed > 0 else math.inf, name,
                                  value / eager if eager > 0 else math.inf, relative))
        return found

    figures = sorted((f for _, v in failing for f in over_budget(v)), key=lambda f: -f[0])
    factor_note = ""
    if figures:
        ratio, figure, factor, relative = figures[0]
        if not math.isfinite(factor):  # eager is exact in the worst case: the median over the others says more
            finite = [f[2] for f in figures if math.isfinite(f[2])]
            if finite:
                factor, factor_note = statistics.median(finite), "median over the failing cases"
    else:  # only sampled elements beyond their own bounds (the componentwise check)
        worst = max(failing, key=lambda item: item[1].ratio)[1]
        ratio, figure, factor, relative = worst.ratio, "sampled elements", math.inf, 0.0
    failing_by_regime: dict[str, int] = {}
    for case, _ in failing:
        failing_by_regime[case.regime] = failing_by_regime.get(case.regime, 0) + 1
    planned_by_regime: dict[str, int] = {}
    for case in planned:
        planned_by_regime[case.regime] = planned_by_regime.get(case.regime, 0) + 1
    concentrated = tuple(sorted(((r, f, planned_by_regime.get(r, f)) for r, f in failing_by_regime.items()),
                                key=lambda item: (-item[1] / max(item[2], 1), -item[1], item[0])))
    fan_in = max((b.fan_in for _, v in failing for b in v.budgets), default=0)
    wider = sorted({d for d in out_dtypes if d != dtype and dt.is_float(d)})
    return PrecisionFinding(
        failing=len(failing), cases=len(planned), factor_over_eager=factor, factor_note=factor_note, figure=figure,
        budget_ratio=ratio, relative_rmse=relative, concentrated=concentrated,
        above_declared_only=all(_above_declared(c, declared) for c, _ in failing),
        cause=_likely_cause(dtype, wider, fan_in, float32_rerun, eager_exact=not math.isfinite(factor)),
        float32_rerun=float32_rerun)


def _elementwise_cause(dtype: str) -> str:
    return (f"likely cause: {ELEMENTWISE_CAUSE}, a cancellation such as "
            "log(1 + e^-x) or 1 - sigmoid(x) where log1p, expm1 or a rearranged form is exact, or an approximate "
            f"function; the error is relative to the output, in {dtype}")


def _likely_cause(dtype: str, wider_outputs: Sequence[str], fan_in: int, float32_rerun: str,
                  eager_exact: bool = False) -> str:
    if dtype in LOW_PRECISION_DTYPES and fan_in == 1 and float32_rerun == "fails":
        # an elementwise output wrong in float32 too: the formula loses the digits, not a bfloat16 rounding (fla's
        # logsigmoid in bfloat16 returned 0 for x >= 13.1, as its float32 does: library corpus RESULTS.md)
        return _elementwise_cause(dtype) + " (in float32 the same implementation still fails these cases)"
    if dtype in LOW_PRECISION_DTYPES:
        what = f"a reduction accumulated in {dtype}" if fan_in > 1 else f"an intermediate rounded to {dtype}"
        if wider_outputs:
            what += f" before a {'/'.join(wider_outputs)} output"
        if float32_rerun == "passes":
            return (f"likely cause: {what} (eager accumulates in float32); the same implementation on the same values "
                    "in float32 passes these cases, so its formula is right")
        shrinks = (f"in float32 the same implementation's error falls {FLOAT32_SHRINK:g}x or more, so its formula is "
                   "right")
        if float32_rerun == "shrinks" and eager_exact:
            return (f"likely cause: values rounded to {dtype} on one side of a difference {ROUNDING_MISMATCH_CAUSE} "
                    f"({shrinks})")
        if float32_rerun == "shrinks":
            return f"likely cause: {what} ({shrinks})"
        if float32_rerun == "fails":
            return (f"likely cause: an intermediate kept in low precision whatever the input dtype (in float32 the "
                    f"same implementation still fails these cases), e.g. {what}")
        return f"likely cause: {what} (eager accumulates in float32)"
    if fan_in == 1:  # each output depends on one input element: no reduction to blame
        return _elementwise_cause(dtype)
    if dtype == "float32":
        return ("likely cause: float32 rounding beyond what float32 accumulation in any order costs (a long "
                "sequential or float16 accumulation, an approximate function); eager's CPU reductions accumulate "
                "float32 in double")
    return "likely cause: rounding beyond eager's in this dtype"
