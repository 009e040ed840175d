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
  reports arithmetic it could not make exact; the GPU run decides.
* an unsupported size (`size_limit`): the implementation raises (cleanly) only on sizes opgate added above every
  declared size.

Cases whose truth is undefined (a NaN converted to an integer, undefined in C and in PyTorch) are not judged and
are counted (`undefined_masks`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from opgate.core import dtypes as dt
from opgate.verify.inputs import Case, make_inputs
from opgate.core.spec import Operator

FAILURE_CLASSES = ("typical", "tail", "layout", "range", "nonfinite", "precision", "unwritten", "crash", "gaming",
                   "stream", "gradient", "memory")
DEVIATION_CLASSES = ("ftz", "range_limit", "interpreter", "size_limit", "undefined")
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


def bisect_breaking_scale(fails: Callable[[float], bool], near: float, far: float,
                          steps: int = BISECT_STEPS) -> float | None:
    """The scale between `near` (passes) and `far` (fails), in log space, closest to `near` at which `fails`
    turns true; `far` may lie above `near` (overflow) or below it (underflow). None if it fails at `near`
    already (not a range effect) or passes at `far` (not reproduced)."""
    if fails(near) or not fails(far):
        return None
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


def input_magnitude(op: Operator, case: Case, dtype: str) -> float:
    """max |x| over the case's finite float inputs."""
    import torch

    generated = make_inputs(op, case, dtype)
    largest = 0.0
    for value in generated.truth:
        if isinstance(value, torch.Tensor) and value.dtype.is_floating_point and value.numel():
            finite = value[torch.isfinite(value)]
            if finite.numel():
                largest = max(largest, float(finite.abs().max()))
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
