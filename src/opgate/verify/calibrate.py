"""Calibrated error budgets: how wrong may an implementation be, given what the dtype itself costs?

Truth: the reference in float64 on CPU, on the test inputs upcast to float64.
Baseline: the reference evaluated in the dtype under test (PyTorch eager on CPU).
The baseline's error against the truth, over every case of the plan (seeds, shapes, regimes), sets
the budget for that op x dtype. A candidate passes a case when

    RMSE     <= max(K_RMSE     * max(baseline RMSE here,  pooled RMSE * RMS|truth|,       sensitivity),
                    accumulation, log-space) + floor * RMS|truth|
    p99.9|e| <= max(K_QUANTILE * max(baseline p99.9 here, pooled q * p99.9|truth|, sensitivity),
                    accumulation, log-space) + floor * p99.9|truth|

where "pooled" is the median over all cases of the baseline's error divided by the same scale of
the truth (RMS for the RMSE, the 99.9th percentile of |truth| for the quantile, since the largest
absolute errors sit on the largest values), sensitivity is how far the truth moves when the inputs are
perturbed by a few units of float32 roundoff (the op's conditioning, see PERTURB_UNITS), accumulation
is what float32 accumulation in any order may cost (error_bounds.accumulation_bounds), log-space what a
float32 row statistic of the inputs' magnitude (the logsumexp of fused softmax / cross-entropy kernels) costs
(error_bounds.logspace_bounds), and floor = FLOOR_EPS[dtype] * eps(dtype). This follows
torch._dynamo's `same()` fp64 rule (candidate error <= multiplier x eager error + tol) with the
quantile added so a few grossly wrong elements cannot hide in an RMSE. NaN/Inf where the truth is
finite always fails. A user `tolerance=` override replaces the budget with |e| <= atol + rtol |truth|
on every element. The method and its defaults are explained in docs/verify-method.md.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from opgate.core import dtypes as dt
from opgate.verify.compare import (
    OutputStats, compare_output, count_exceeding, finite_everywhere, on_device_of, selected, where_compared,
)
from opgate.verify.error_bounds import (
    LOGSPACE_UNITS, OUTPUT_PASSES_S, AccumulationBound, LogspaceBound, accumulation_bounds, logspace_bounds,
)
from opgate.verify.inputs import Case, declared_firsts, first_with_same_values, make_inputs
from opgate.core.spec import Operator, SpecError

# dynamo's `same()` uses multiplier 2.0 on the fp64 RMSE; the quantile gets the same multiple.
K_RMSE = 2.0
K_QUANTILE = 2.0
# Floors in units of the dtype's epsilon, times the truth's RMS. In reduced precision (float16,
# bfloat16, float8) the floor is half an epsilon: the error bound of a correctly rounded result at
# unit scale, so a baseline that happens to be exact never leaves a zero budget. In float32,
# legitimate algorithm differences (reduction order, GPU fast exp/rsqrt at ~2 ulp) exceed 2x a
# correctly rounded CPU baseline, so the floor is 8 eps (~1e-6; torch.testing's float32 rtol is
# 1.3e-6). In float64 the baseline *is* the truth, so the floor alone is the budget.
FLOOR_EPS: dict[str, float] = {
    "float64": 1e5,  # 2.2e-11 x RMS: reductions over 1e6 elements stay well inside
    "float32": 8.0,
    "float16": 0.5,
    "bfloat16": 0.5,
    "float8_e4m3fn": 0.5,
    "float8_e5m2": 0.5,
}
# Quantized integer outputs: off by one quantum is a rounding difference; the RMSE floor admits it
# on 0.1% of the elements (sqrt(1e-3) quanta), the quantile floor is one quantum.
QUANTIZED_RMSE_FLOOR_QUANTA = math.sqrt(1e-3)
QUANTIZED_QUANTILE_FLOOR_QUANTA = 1.0
OVERRIDE_KEYS = ("atol", "rtol")
# Conditioning: the truth is also evaluated on inputs perturbed by up to PERTURB_UNITS units of the
# working precision's roundoff (float32 for every dtype but float64), i.e. what an accurate (backward
# stable) computation may legitimately return. Where the op is ill-conditioned (layer norm of an almost
# constant row amplifies input rounding by 1/sqrt(eps)), that sensitivity, not the eager baseline's
# lucky exactness, sets the scale of the budget.
PERTURB_UNITS = 4.0
WORKING_ROUNDOFF = {"float64": 2.0**-53}
DEFAULT_WORKING_ROUNDOFF = 2.0**-24  # float32: what a well-written kernel computes in
# The componentwise check (element_allowances): each sampled element on its own may err by
#   K_ELEMENT x rho x (|y| + sum_j |dy/dx_j x_j|)     the eager baseline's error model, scaled to this element
#   + 2 x its accumulation bound + 2 x the log-space statistic's expm1(theta) (absolute: a loss carries it so)
#   + ELEMENT_FLOOR_EPS eps |y| (the output's own rounding) + the dtype's subnormal spacing
# No floor at the case's scale: log(1 + exp(x)) for softplus at x = -20 returns 0 for 2e-9, every digit lost, and
# a user of softplus > 0 (Mamba's dt, a variance head) sees it (blind corpus, blind_softplus.py)
# rho is the largest over the case's sampled elements of what eager loses beyond its own output rounding, relative
# to |y| + sum_j |dy/dx_j x_j|: the largest, not the RMS, because eager loses digits at the few elements a
# composite reference cancels at (a bfloat16 x cos - y sin) and an RMS over 20 samples dilutes them (the GPU run of
# rotary.py's bf16 kernel failed at 1.8x such an RMS, and at 1.1x 4 x the largest: its bf16 products round where
# eager's happened not to). K_ELEMENT 8; the float16-logsumexp cross-entropy still fails at 1.8x.
K_ELEMENT = 8.0
ELEMENT_FLOOR_EPS = 2.0
# + FORMED_IN_DTYPE x u x sum_j |dy/dx_j x_j| where the reference is a norm alone (error_bounds.NORMALIZED_IN_DTYPE),
# u the unit roundoff of a half-precision output (float16, bfloat16): its terms formed once in the dtype, a factor
# rounded and the product rounded. transformers' LlamaRMSNorm, Llama's own definition, returns
# weight * x_hat.to(dtype), and its eager autograd multiplies the upstream gradient by that rounded x_hat in the
# dtype; a fused reference (F.rms_norm) rounds neither, and against it the formula's gradient failed in float16
# (4.5x, 6/58 cases) and bfloat16 (4.9x, 35/58), as did unsloth's kernel, which matches it (held-out corpus). Not
# for every reference: allowed everywhere, it hid the truth corpus's float16-accumulator matmul, low-precision
# logsumexp cross-entropy and float16 split-row atomics (two roundings of a term are what a float16 accumulator
# loses over about nine terms of random sign). float32 is not changed: its kernels form their terms in float32.
FORMED_IN_DTYPE = 2.0
FORMED_IN_DTYPE_DTYPES = ("float16", "bfloat16")


# What can set a budget, in the words the report uses.
BUDGET_TERMS = {
    "baseline": "PyTorch eager in the dtype, this case",
    "pooled": "PyTorch eager in the dtype, median over the plan",
    "sensitivity": "input-perturbation sensitivity (ill-conditioned here)",
    "accumulation": "float32-accumulation error bound (any summation order)",
    "logspace": "float32 log-space statistic bound (exp(x - lse) with lse rounded at the inputs' magnitude)",
    "floor": "floor",
}


class CalibrationError(Exception):
    """The reference itself failed on a case: no truth, no verdict."""


@dataclass(frozen=True)
class OutputBudget:
    """What one output of one case may deviate from the truth, with where each number comes from."""

    rmse: float
    quantile: float
    scale: float
    baseline_rmse: float
    baseline_quantile: float
    sensitivity_rmse: float = 0.0  # output change from PERTURB_UNITS of input roundoff (see above)
    sensitivity_quantile: float = 0.0
    accumulation_rmse: float = 0.0  # error_bounds: what float32 accumulation in any order may cost here
    accumulation_quantile: float = 0.0
    fan_in: int = 0  # the largest number of inputs one sampled output element depends on
    logspace_rmse: float = 0.0  # error_bounds: what a float32 max/logsumexp of the inputs' magnitude may cost here
    logspace_quantile: float = 0.0
    rmse_term: str = ""  # which term set the RMSE budget (see BUDGET_TERMS)
    quantile_term: str = ""
    exact_mismatches: int = -1  # integer outputs: allowed differing elements (-1: not judged)
    off_by_more_than_one: int = -1  # integer outputs: allowed elements more than one quantum off
    atol: float | None = None  # user override
    rtol: float | None = None
    rmse_source: str = ""
    quantile_source: str = ""
    # the componentwise check: (flat index, largest |error| allowed there) for the sampled elements (see
    # element_allowances); empty where it does not apply
    elements: tuple[tuple[int, float], ...] = ()

    @property
    def is_override(self) -> bool:
        return self.atol is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "OutputBudget":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass
class Calibration:
    """The budget of one op x dtype: per case and output, plus the pooled figures that explain it."""

    op: str
    dtype: str
    n_cases: int
    out_dtypes: list[str]
    budgets: list[list[OutputBudget]]  # [case][output]
    baseline: list[list[OutputStats]]  # [case][output]
    pooled_rmse: list[float]  # per output: median baseline RMSE / RMS(truth)
    pooled_quantile: list[float]  # per output: median baseline p99.9 |error| / p99.9 |truth|
    masks: list[list[Any]] = field(default_factory=list)  # [case][output]: baseline non-finite, or None
    override: Mapping[str, float] | None = None
    excluded_cases: int = 0  # cases where the baseline was non-finite and excused
    notes: list[str] = field(default_factory=list)
    pooled_element_rho: list[float] = field(default_factory=list)  # per output: median eager loss (element_allowances)
    bounds_seconds: float = 0.0  # of the calibration's time, the cases' bound terms (computed or from the cache)
    deferred_cases: int = 0  # cases whose budgets the numerics check computes if it runs them (budgets row empty)

    def summary(self) -> dict[str, Any]:
        return {
            "op": self.op, "dtype": self.dtype, "n_cases": self.n_cases, "out_dtypes": self.out_dtypes,
            "pooled_rmse_rel": self.pooled_rmse, "pooled_quantile_rel": self.pooled_quantile,
            "k_rmse": K_RMSE, "k_quantile": K_QUANTILE, "floor_eps": FLOOR_EPS.get(self.dtype),
            "override": dict(self.override) if self.override else None, "notes": self.notes,
            "pooled_element_rho": self.pooled_element_rho, "deferred_cases": self.deferred_cases,
        }


def as_outputs(value: Any) -> list[Any]:
    """A reference or implementation may return one tensor or a tuple/list of them."""
    if isinstance(value, (tuple, list)):
        return list(value)
    return [value]


def user_override(op: Operator, dtype: str) -> Mapping[str, float] | None:
    if not op.tolerance or dtype not in op.tolerance:
        return None
    override = dict(op.tolerance[dtype])
    unknown = sorted(set(override) - set(OVERRIDE_KEYS))
    if unknown:
        raise SpecError(f"operator {op.name!r}: tolerance[{dtype!r}] has key {unknown[0]!r}; use atol and rtol")
    return {"atol": float(override.get("atol", 0.0)), "rtol": float(override.get("rtol", 0.0))}


def truth_and_baseline(op: Operator, case: Case, dtype: str) -> tuple[list[Any], list[Any]]:
    """The reference on float64 inputs (truth) and on the dtype's inputs (baseline), both on CPU."""
    import torch

    generated = make_inputs(op, case, dtype)
    try:
        with torch.no_grad():
            truth = as_outputs(op.reference(*generated.truth))
            baseline = as_outputs(op.reference(*generated.values))
    except Exception as exc:
        raise CalibrationError(
            f"the reference of {op.name!r} raised {type(exc).__name__} on {case.label()} ({dtype}): {exc}"
        ) from exc
    for i, (t, b) in enumerate(zip(truth, baseline)):
        if not isinstance(t, torch.Tensor) or not isinstance(b, torch.Tensor):
            raise CalibrationError(f"the reference of {op.name!r} returned {type(t).__name__} for output {i}; "
                                   "it must return a tensor or a tuple of tensors")
    return [t.detach().cpu() for t in truth], [b.detach().cpu() for b in baseline]


def _perturbation_steps(generated_truth: Sequence[Any], scale: float, seed: int) -> list[Any]:
    """Per input: a relative step uniform in +-scale for float64 tensors (None for the rest), seeded."""
    import torch

    gen = torch.Generator().manual_seed(seed)  # drawn on the CPU: the same steps wherever the terms run
    # in place: the same values as (rand * 2 - 1) * scale without two temporaries (a 4.2 M-element step in 29 ms
    # instead of 57 ms on one core; these draws were 196 CPU-s of a library run's calibration on the H200 host)
    return [torch.rand(v.shape, generator=gen, dtype=torch.float64).mul_(2).sub_(1).mul_(scale).to(v.device)
            if isinstance(v, torch.Tensor) and v.dtype == torch.float64 else None for v in generated_truth]


def _moved_by(value: Any, step: Any, sign: float) -> Any:
    """value x (1 + sign x step), bit for bit and in the same layout, in two passes instead of three: sign is +-1, so
    sign x step is exact and 1 + sign x step is 1 + step or 1 - step (these products were 3.2 s of a 17.6 s
    calibration of fla_kl_div's float32 plan on one core)."""
    import torch

    factor = step.add(1.0) if sign > 0 else torch.rsub(step, 1.0)  # 1 - step
    return torch.mul(value, factor)  # the last product as before: its output takes the value's layout as it did


def _reference_moved(op: Operator, generated_truth: Sequence[Any], steps: Sequence[Any],
                     sign: float) -> list[Any] | None:
    """The reference on the inputs moved by sign x steps (relative), as CPU float64 outputs; None if it raises
    (it ran on these inputs' values once already: a failure here adds no budget)."""
    import torch

    args = [_moved_by(v, step, sign) if step is not None else v for v, step in zip(generated_truth, steps)]
    try:
        with torch.no_grad():
            outputs = as_outputs(op.reference(*args))
    except Exception:
        return None
    return [o.detach().cpu().to(torch.float64) if isinstance(o, torch.Tensor) else o for o in outputs]


def _comparable(truth: Any, *moved: Any) -> Any | None:
    """The mask of elements finite in the truth and every moved output; None where they cannot be compared."""
    import torch

    if not truth.dtype.is_floating_point or any(not isinstance(m, torch.Tensor) or m.shape != truth.shape
                                                for m in moved):
        return None
    both = torch.isfinite(truth)
    for m in moved:
        both &= torch.isfinite(m)
    return both if bool(both.any()) else None


def _rms_and_quantile(values: Any) -> tuple[float, float]:
    import numpy as np

    from opgate.verify.compare import QUANTILE

    return float(values.pow(2).mean().sqrt()), float(np.quantile(values.numpy(), QUANTILE))


def perturbation_sensitivity(op: Operator, inputs: Sequence[Any], dtype: str, seed: int,
                             truth: Sequence[Any]) -> list[tuple[float, float]]:
    """Per output: RMS and p99.9 of how far the float64 truth moves when every float input (the case's float64
    `inputs`) is perturbed elementwise by a relative amount uniform in +-PERTURB_UNITS x the working roundoff
    (seeded by the case's `seed`)."""
    import torch

    steps = _perturbation_steps(inputs, WORKING_ROUNDOFF.get(dtype, DEFAULT_WORKING_ROUNDOFF) * PERTURB_UNITS,
                                seed * 7 + 3)
    moved = _reference_moved(op, inputs, steps, 1.0)
    if moved is None:
        return [(0.0, 0.0)] * len(truth)
    figures = []
    for t, m in zip(truth, moved):
        t64 = t.to(torch.float64)
        both = _comparable(t64, m)
        figures.append(_rms_and_quantile((m - t64).abs()[both]) if both is not None else (0.0, 0.0))
    return figures


def curvature_sensitivity(op: Operator, inputs: Sequence[Any], dtype: str, seed: int,
                          truth: Sequence[Any]) -> list[tuple[float, float]]:
    """Per output: RMS and p99.9 of the second-order change of the truth, (y(x + d) + y(x - d)) / 2 - y(x), for a
    relative perturbation d uniform in +-PERTURB_UNITS sqrt(n) u (n the longest last dim: what a sum's rounding does
    to the statistic it feeds), where it exceeds the first-order change (y(x + d) - y(x - d)) / 2; else zero.

    At a stationary point the first-order terms vanish and a correct kernel's error is second order: a two-pass
    variance of a constant row is (mean's rounding)^2, 5.7e-14 where the truth is 0 and the 4u perturbation
    above gives 2.7e-14 (blind corpus, blind_variance.py). Away from one the first-order change dominates and this
    adds nothing (a softmax at large logits keeps its budget)."""
    import torch

    longest = max((int(v.shape[-1]) for v in inputs
                   if isinstance(v, torch.Tensor) and v.dtype == torch.float64 and v.dim() > 0), default=1)
    scale = WORKING_ROUNDOFF.get(dtype, DEFAULT_WORKING_ROUNDOFF) * PERTURB_UNITS * math.sqrt(max(longest, 1))
    steps = _perturbation_steps(inputs, scale, seed * 7 + 5)
    up = _reference_moved(op, inputs, steps, 1.0)
    down = _reference_moved(op, inputs, steps, -1.0)
    if up is None or down is None:
        return [(0.0, 0.0)] * len(truth)
    figures = []
    for t, a, b in zip(truth, up, down):
        t64 = t.to(torch.float64)
        both = _comparable(t64, a, b)
        if both is None:
            figures.append((0.0, 0.0))
            continue
        second = ((a + b) / 2 - t64).abs()[both]
        first = ((a - b) / 2).abs()[both]
        stationary = float(second.pow(2).mean()) > float(first.pow(2).mean())
        figures.append(_rms_and_quantile(second) if stationary else (0.0, 0.0))
    return figures


def input_sensitivity(op: Operator, inputs: Sequence[Any], dtype: str, seed: int,
                      truth: Sequence[Any]) -> list[tuple[float, float]]:
    """The larger of the first-order perturbation sensitivity and the second-order one, per output."""
    first = perturbation_sensitivity(op, inputs, dtype, seed, truth)
    second = curvature_sensitivity(op, inputs, dtype, seed, truth)
    return [(max(a[0], b[0]), max(a[1], b[1])) for a, b in zip(first, second)]


def baseline_lost_mask(truth: Any, baseline: Any) -> Any:
    """Elements the dtype cannot deliver, judged by what PyTorch eager in this dtype does with them:
    eager returns NaN/Inf where the truth is finite; eager misses an overflow (truth beyond the dtype's
    range, eager not the matching infinity); or eager fails the whole case (its RMSE is at least half the
    truth's RMS, e.g. SDPA returning 0 where QK^T overflows float32) and is off by half or more on this
    element. A candidate's NaN/Inf on these elements is excused and counted as such."""
    import torch

    if not baseline.dtype.is_floating_point:
        return torch.zeros(truth.shape, dtype=torch.bool)
    t = truth.to(torch.float64)
    b = baseline.to(torch.float64)
    t_in_dtype = t.to(baseline.dtype).to(torch.float64)
    if finite_everywhere(t, t_in_dtype, b):  # the common case: nothing non-finite to excuse, no overflow
        truth_rms = float(t.pow(2).mean().sqrt())
        eager_rmse = float((b - t).pow(2).mean().sqrt())
        if truth_rms > 0 and eager_rmse >= 0.5 * truth_rms:
            return ((b - t).abs() >= 0.5 * t.abs()) & (b != t)
        return torch.zeros(truth.shape, dtype=torch.bool)
    finite = torch.isfinite(t)
    fits = torch.isfinite(t_in_dtype)
    usable = finite & fits
    lost_in_range = usable & ~torch.isfinite(b)
    both = usable & torch.isfinite(b)
    if bool(both.any()):
        everywhere = bool(both.all())
        t_both, b_both = selected(t, both, everywhere), selected(b, both, everywhere)
        truth_rms = float(t_both.pow(2).mean().sqrt())
        eager_rmse = float((b_both - t_both).pow(2).mean().sqrt())
        if truth_rms > 0 and eager_rmse >= 0.5 * truth_rms:  # eager fails this case as a whole
            lost_in_range |= both & ((b - t).abs() >= 0.5 * t.abs()) & (b != t)
    lost_overflow = finite & ~fits & (b != t_in_dtype)
    return lost_in_range | lost_overflow


def output_names(count: int) -> list[str]:
    return ["out"] if count == 1 else [f"out{i}" for i in range(count)]


def _median(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else 0.0


def calibrate(
    op: Operator,
    dtype: str,
    cases: Sequence[Case],
    truths: Sequence[Sequence[Any]],
    baselines: Sequence[Sequence[Any]],
    defer_after_s: float = 0.0,
) -> Calibration:
    """Turn the baseline's errors over all cases into a per-case budget (see the module docstring); bound terms past
    `defer_after_s` seconds are deferred (bounds_until_deferred; 0: none)."""
    quantized = op.quantized
    n_outputs = len(truths[0]) if truths else 1
    out_dtypes = [dt.dtype_name(b.dtype) for b in baselines[0]] if baselines else [dtype]
    names = output_names(n_outputs)
    baseline_stats: list[list[OutputStats]] = []
    masks: list[list[Any]] = []
    notes: list[str] = []
    excluded = 0
    # a layout case holding its declared size's values has that case's truth, baseline and statistics
    first = first_with_same_values(cases)
    for k, (truth, baseline) in enumerate(zip(truths, baselines)):
        if first[k] != k:
            baseline_stats.append(list(baseline_stats[first[k]]))
            masks.append(list(masks[first[k]]))
            excluded += sum(1 for stats in baseline_stats[k] if stats.nonfinite_excused)
            continue
        row, mask_row = [], []
        for name, t, b in zip(names, truth, baseline):
            mask = baseline_lost_mask(t, b)
            stats = compare_output(b, t, dt.dtype_name(b.dtype), name, baseline_lost=mask,
                                   quantized=_quantized_for(quantized, b))
            row.append(stats)
            mask_row.append(mask if bool(mask.any()) else None)
            if stats.nonfinite_excused:
                excluded += 1
        baseline_stats.append(row)
        masks.append(mask_row)
    if excluded:
        notes.append(f"in {excluded} case output(s) PyTorch eager in {dtype} itself fails elements where the "
                     "float64 truth is finite (NaN/Inf, or off by more than the value); a candidate's NaN/Inf on "
                     "exactly those elements is excused")

    # one vote per set of values: a layout case holding its declared size's values repeats that case's errors
    distinct = {k for k in range(len(cases)) if first[k] == k}
    pooled_rows = [row for k, row in enumerate(baseline_stats) if k in distinct]
    pooled_rmse, pooled_q = [], []
    for o in range(n_outputs):
        rel_rmse = [row[o].rmse / row[o].truth_rms for row in pooled_rows if row[o].truth_rms > 0]
        rel_q = [row[o].quantile_abs / row[o].truth_quantile_abs for row in pooled_rows
                 if row[o].truth_quantile_abs > 0]
        pooled_rmse.append(_median(rel_rmse))
        pooled_q.append(_median(rel_q))

    override = user_override(op, dtype)
    n = len(cases)
    began = time.perf_counter()
    case_bounds = bounds_until_deferred(op, cases, dtype, truths, defer_after_s)
    bounds_seconds = time.perf_counter() - began
    # what eager loses at the componentwise check's elements, pooled over the cases like the RMSE: a case where eager
    # happens to be exact (a bfloat16 q cos - q' sin on constant rows) must not demand exactness of everyone. Over
    # every case when none was deferred; else over the cases never deferred, since which others were computed
    # depends on the clock and a replay must pool as its run did (pooling over those alone loosened the bfloat16
    # softmax backward's budgets: tests/verify/test_verify_precision_class.py)
    deferred = sum(1 for bounds in case_bounds if bounds is None)
    pooled = (essential_cases(cases)[1] if deferred else set(range(n))) & distinct
    pooled_rho = [_median([rho for k, (bounds, truth, baseline) in enumerate(zip(case_bounds, truths, baselines))
                           if k in pooled and bounds is not None
                           and (rho := eager_element_loss(truth[o], baseline[o], bounds.accumulation[o])) is not None])
                  for o in range(n_outputs)]
    budgets: list[list[OutputBudget]] = []
    for k, (bounds, truth, row, baseline) in enumerate(zip(case_bounds, truths, baseline_stats, baselines)):
        if first[k] != k and bounds is case_bounds[first[k]]:  # the same values and bounds: the same budgets
            budgets.append(list(budgets[first[k]]))
            continue
        budgets.append([] if bounds is None else  # deferred: the numerics check computes it if it runs the case
                       [bounds.budget(o, stats, truth[o], b, pooled_rmse[o], pooled_q[o], n, override,
                                      _quantized_for(quantized, b), pooled_rho[o])
                        for o, (stats, b) in enumerate(zip(row, baseline))])
    thinned = [max(a.thinned_from for a in bounds.accumulation) for bounds in case_bounds
               if bounds is not None and any(a.thinned_from for a in bounds.accumulation)]
    if thinned:
        notes.append(f"{len(thinned)} of {n} cases' accumulation bounds sampled fewer output elements than the "
                     f"{max(thinned)} they draw: one reverse pass of the reference there took over "
                     f"{OUTPUT_PASSES_S / max(thinned):.2g} s (error_bounds.OUTPUT_PASSES_S)")
    if deferred:
        notes.append(f"{deferred} of {n} cases' bound terms were deferred to the numerics check, which computes "
                     "them for the cases it runs (their time counts in its time budget)")
    return Calibration(op.name, dtype, n, out_dtypes, budgets, baseline_stats, pooled_rmse, pooled_q,
                       masks, override, excluded, notes, pooled_rho, bounds_seconds, deferred)


# Seconds of bound terms one operator x dtype's calibration computes for every case before it defers the rest
# (never a declared case or the first case of a regime x layout): on the 2-core CPU runner the bound terms were 85%
# of fla's losses' calibrations (160-480 s per operator) and about half of them were for cases the numerics then
# capped (twelfth H200 session, in the history of docs/benchmarks.md). On a GPU run nothing is deferred: the bound
# terms run on the GPU in calibration processes beside the checks, whose slots are what a library waits for there.
# Deferring past 60 s of a plan there was tried (twenty-eighth H200 session): fla_short_conv.grad's calibration
# went from 370 s to 60 s a dtype, but its three checks took 238-271 s each computing the terms, and fla_kl_div.grad's
# and fla_linear_cross_entropy.grad's checks 69-108 s instead of 35-44 s: the cost moved into the slots, and grew.
# OPGATE_DEFER_BOUNDS_S overrides both; 0 defers nothing.
DEFER_BOUNDS_AFTER_S = 10.0


def deferral_seconds(gpu: bool) -> float:
    import os

    default = 0.0 if gpu else DEFER_BOUNDS_AFTER_S
    raw = os.environ.get("OPGATE_DEFER_BOUNDS_S", "").strip()
    try:
        return float(raw) if raw else default
    except ValueError:
        return default


def bounds_until_deferred(op: Operator, cases: Sequence[Case], dtype: str, truths: Sequence[Sequence[Any]],
                          defer_after_s: float) -> list["CaseBounds | None"]:
    """Each case's bounds, in the order the numerics' time budget keeps cases (declared, the first of each regime x
    layout, then the smallest first); once `defer_after_s` have gone, the cases past the essential ones are None
    (deferred). 0: every case computed."""
    order, essential = essential_cases(cases)
    out: list[CaseBounds | None] = [None] * len(cases)
    first = first_with_same_values(cases)  # a layout case's values are its declared size's (plan_cases)
    began = time.perf_counter()
    for k in order:
        if k in essential or defer_after_s <= 0 or time.perf_counter() - began < defer_after_s:
            shared = out[first[k]]
            out[k] = shared if shared is not None else CaseBounds.of(op, cases[k], dtype, truths[k])
    return out


def essential_cases(cases: Sequence[Case]) -> tuple[list[int], set[int]]:
    """(every case index in the order a time budget keeps cases, the ones never deferred): each declared size's first
    seed (inputs.declared_firsts), then the smallest case of each regime x layout not yet covered, then the rest
    (a declared size's other seeds among them) smallest first."""
    declared = sorted(declared_firsts(cases))
    by_size = sorted((k for k in range(len(cases)) if k not in declared),
                     key=lambda k: (math.prod(v for _, v in cases[k].dims), k))
    kinds = {(cases[k].regime, cases[k].layout) for k in declared}
    first_of_kind = []
    for k in by_size:
        if (cases[k].regime, cases[k].layout) not in kinds:
            kinds.add((cases[k].regime, cases[k].layout))
            first_of_kind.append(k)
    essential = set(declared) | set(first_of_kind)
    return [*declared, *first_of_kind, *(k for k in by_size if k not in essential)], essential


# How many cases' bounds this process took from the disk cache and how many it computed (the engine reports it).
# The bound terms of this process's cases: from the disk cache or computed, how many on the GPU, and the milliseconds
# each device's terms took, placing them included (verify/bounds_device.py): a plan's report says whether moving its
# terms to the GPU paid (softmax's on the H200 took 7-9 s a dtype beside sanitizer runs, its whole plan 1.4 s on a
# 2-core CPU: thirty-third session)
CACHE_COUNTS = {"hit": 0, "computed": 0, "on_gpu": 0, "gpu_out_of_memory": 0, "terms_ms_on_gpu": 0,
                "terms_ms_on_cpu": 0}


@dataclass(frozen=True)
class CaseBounds:
    """What one case's float64 reference says a correct implementation may cost, per output: the input-perturbation
    sensitivity, the accumulation bound (with its sampled elements) and the log-space bound."""

    sensitivity: list[tuple[float, float]]
    accumulation: list[AccumulationBound]
    logspace: list[LogspaceBound]

    @classmethod
    def of(cls, op: Operator, case: Case, dtype: str, truth: Sequence[Any]) -> "CaseBounds":
        """The case's bounds, from the disk cache when the same inputs, truth, reference and judging code met
        before (verify/bounds_cache.py), else computed and stored."""
        from opgate.gpu.judge.oom import exception_is_out_of_memory
        from opgate.verify import bounds_cache, bounds_device

        key = None
        inputs = make_inputs(op, case, dtype).truth  # the float64 values the truth was computed from
        if bounds_cache.cache_root() is not None:
            key = bounds_cache.entry_key(op.reference, case, dtype, inputs, truth)
            cached = bounds_cache.load(key)
            if cached is not None and len(cached.sensitivity) == len(truth):
                CACHE_COUNTS["hit"] += 1
                return cached
        bounds: CaseBounds | None = None
        began = time.perf_counter()
        with bounds_device.placed(op.reference, inputs, truth) as (where, device):
            try:
                bounds = cls._computed(op, case, dtype, truth, where)
            except Exception as exc:
                if device != "cuda" or not exception_is_out_of_memory(exc):
                    raise
                # the GPU is full (other checks' workers hold its memory, a recovery check fills it): these terms
                # are float64 arithmetic that the CPU computes the same, only slower
                CACHE_COUNTS["gpu_out_of_memory"] += 1
        if bounds is None:
            bounds, device = cls._computed(op, case, dtype, truth, inputs), "cpu"
        CACHE_COUNTS["computed"] += 1
        CACHE_COUNTS["on_gpu"] += int(device == "cuda")
        CACHE_COUNTS["terms_ms_on_gpu" if device == "cuda" else "terms_ms_on_cpu"] += round(
            1000 * (time.perf_counter() - began))
        if key is not None:
            bounds_cache.store(key, bounds)
        return bounds

    @classmethod
    def _computed(cls, op: Operator, case: Case, dtype: str, truth: Sequence[Any], where: Sequence[Any]) -> "CaseBounds":
        return cls(input_sensitivity(op, where, dtype, case.seed, truth),
                   accumulation_bounds(op.reference, where, truth, dtype, case.seed),
                   logspace_bounds(op.reference, where, truth, dtype))

    def budget(self, o: int, stats: OutputStats, truth: Any, baseline: Any, pooled_rmse: float, pooled_q: float,
               n_cases: int, override: Mapping[str, float] | None,
               quantized: Mapping[str, Any] | None, pooled_rho: float = 0.0) -> OutputBudget:
        """Output o's budget, with the componentwise allowances of its sampled elements."""
        import dataclasses

        budget = _budget_for(stats, dt.dtype_name(baseline.dtype), pooled_rmse, pooled_q, n_cases, override,
                             quantized, self.sensitivity[o], self.accumulation[o], self.logspace[o])
        if budget.is_override:
            return budget  # a user tolerance: |e| <= atol + rtol |truth| everywhere already
        return dataclasses.replace(budget, elements=element_allowances(truth, baseline, self.accumulation[o],
                                                                       self.logspace[o], pooled_rho))


def eager_element_loss(truth: Any, baseline: Any, accumulation: AccumulationBound) -> float | None:
    """rho of element_allowances: the largest, over the case's sampled elements, of what PyTorch eager in the dtype
    loses beyond its own output rounding, relative to |y_i| + m_i; None where the case has no such element."""
    import torch

    if not accumulation.elements or not baseline.dtype.is_floating_point or baseline.shape != truth.shape:
        return None
    out_dtype = dt.dtype_name(baseline.dtype)
    t = truth.reshape(-1).to(torch.float64)
    b = baseline.reshape(-1).to(torch.float64)
    eps = dt.eps(out_dtype)
    floor_eps = max(FLOOR_EPS.get(out_dtype, 1.0), ELEMENT_FLOOR_EPS)
    spacing = dt.smallest_normal(out_dtype) * eps
    rho = 0.0
    for element in accumulation.elements:
        ti, bi = float(t[element.index]), float(b[element.index])
        if math.isfinite(ti) and math.isfinite(bi):
            # what eager loses beyond the output's own rounding (which the floor allows everywhere)
            lost = max(0.0, abs(bi - ti) - floor_eps * eps * abs(ti) - spacing)
            rho = max(rho, lost / (abs(ti) + element.magnitude))
    return rho


def element_allowances(truth: Any, baseline: Any, accumulation: AccumulationBound,
                       logspace: LogspaceBound, pooled_rho: float = 0.0) -> tuple[tuple[int, float], ...]:
    """(flat index, allowed |error|) for the componentwise check of every sampled element with a bound.

    The pooled RMSE and p99.9 budgets scale with the case's largest values, so a few elements far smaller than
    the rest can lose every digit unseen: a cross-entropy row whose label hits a confident logit (loss 1e-4
    beside losses of 20) computed from a float16 logsumexp, a suffix sum taken as total - prefix after the 1e8 of
    its row. Each sampled element (random, largest and smallest |truth|) is therefore also judged against its own
    allowance (see K_ELEMENT)."""
    import torch

    if not accumulation.elements or not baseline.dtype.is_floating_point or baseline.shape != truth.shape:
        return ()
    out_dtype = dt.dtype_name(baseline.dtype)
    t = truth.reshape(-1).to(torch.float64)
    eps = dt.eps(out_dtype)
    floor_eps = max(FLOOR_EPS.get(out_dtype, 1.0), ELEMENT_FLOOR_EPS)
    spacing = dt.smallest_normal(out_dtype) * eps  # the dtype's subnormal step: 1e-10 is 0 in float16
    rho = max(eager_element_loss(truth, baseline, accumulation) or 0.0, pooled_rho)
    absolute = 2.0 * logspace.relative + spacing
    formed = (FORMED_IN_DTYPE * eps / 2.0 if accumulation.formed_in_dtype and out_dtype in FORMED_IN_DTYPE_DTYPES
              else 0.0)
    allowances = []
    for element in accumulation.elements:
        size = abs(float(t[element.index]))
        allowed = ((K_ELEMENT * rho + formed) * element.magnitude + K_ELEMENT * rho * size + 2.0 * element.bound
                   + floor_eps * eps * size + absolute)
        if math.isfinite(allowed):
            allowances.append((element.index, allowed))
    return tuple(allowances)


def _quantized_for(quantized: Mapping[str, Any] | None, output: Any) -> Mapping[str, Any] | None:
    """The quantization parameters apply to integer outputs only."""
    import torch

    if quantized and not output.dtype.is_floating_point and output.dtype != torch.bool:
        return quantized
    return None


def _budget_for(stats: OutputStats, out_dtype: str, pooled_rmse: float, pooled_q: float, n_cases: int,
                override: Mapping[str, float] | None, quantized: Mapping[str, Any] | None,
                sensitivity: tuple[float, float] = (0.0, 0.0),
                accumulation: AccumulationBound = AccumulationBound(),
                logspace: LogspaceBound = LogspaceBound()) -> OutputBudget:
    # scaled by the truth over every element a candidate is judged on: where eager's float16 overflows most of an
    # output (fla's gated RMSNorm gradient, library corpus), the elements it kept are the small ones, and a floor
    # scaled by them was a tenth of a correctly rounded result's error
    scale = max(stats.truth_rms_all, stats.truth_rms)
    q_scale = max(stats.truth_quantile_all, stats.truth_quantile_abs)
    if override is not None:
        text = f"user tolerance= override: |e| <= {override['atol']:g} + {override['rtol']:g} x |truth| everywhere"
        return OutputBudget(rmse=math.inf, quantile=math.inf, scale=scale, baseline_rmse=stats.rmse,
                            baseline_quantile=stats.quantile_abs, atol=override["atol"], rtol=override["rtol"],
                            rmse_source=text, quantile_source=text)
    if not dt.is_float(out_dtype) and not quantized:
        allowed = math.floor(K_RMSE * stats.exact_mismatches)
        text = f"calibrated: integer output, at most {K_RMSE:g} x the baseline's differing elements"
        return OutputBudget(rmse=math.inf, quantile=math.inf, scale=scale, baseline_rmse=stats.rmse,
                            baseline_quantile=stats.quantile_abs, exact_mismatches=allowed,
                            off_by_more_than_one=math.floor(K_RMSE * stats.off_by_more_than_one),
                            rmse_source=text, quantile_source=text)
    if quantized:
        quantum = float(quantized.get("scale", 1.0))
        rmse_floor = QUANTIZED_RMSE_FLOOR_QUANTA * quantum
        q_floor = QUANTIZED_QUANTILE_FLOOR_QUANTA * quantum
        floor_text = "quantized floor: off-by-one on 0.1% of elements"
    else:
        eps_units = FLOOR_EPS.get(out_dtype, 1.0)
        floor_rel = eps_units * dt.eps(out_dtype)
        # + about the smallest subnormal: an all-zero truth must not leave a zero budget
        tiny = dt.smallest_normal(out_dtype) * dt.eps(out_dtype)
        rmse_floor = floor_rel * scale + tiny
        q_floor = floor_rel * q_scale + tiny
        floor_text = f"floor {eps_units:g} eps x |truth|"
    sens_rmse, sens_q = sensitivity if not quantized else (0.0, 0.0)
    acc_rmse, acc_q = (accumulation.rmse, accumulation.quantile) if not quantized else (0.0, 0.0)
    log_rmse, log_q = (logspace.rmse, logspace.quantile) if not quantized else (0.0, 0.0)
    rmse_term, rmse_core = _largest_term({"baseline": K_RMSE * stats.rmse, "pooled": K_RMSE * pooled_rmse * scale,
                                          "sensitivity": K_RMSE * sens_rmse, "accumulation": acc_rmse,
                                          "logspace": log_rmse})
    q_term, q_core = _largest_term({"baseline": K_QUANTILE * stats.quantile_abs,
                                    "pooled": K_QUANTILE * pooled_q * q_scale,
                                    "sensitivity": K_QUANTILE * sens_q, "accumulation": acc_q,
                                    "logspace": log_q})
    return OutputBudget(
        rmse=rmse_core + rmse_floor,
        quantile=q_core + q_floor,
        scale=scale,
        baseline_rmse=stats.rmse,
        baseline_quantile=stats.quantile_abs,
        sensitivity_rmse=sens_rmse,
        sensitivity_quantile=sens_q,
        accumulation_rmse=acc_rmse,
        accumulation_quantile=acc_q,
        fan_in=accumulation.fan_in,
        logspace_rmse=log_rmse,
        logspace_quantile=log_q,
        rmse_term=rmse_term,
        quantile_term=q_term,
        off_by_more_than_one=math.floor(K_RMSE * stats.off_by_more_than_one) if quantized else -1,
        rmse_source=_term_source(rmse_term, "RMSE", n_cases, floor_text, accumulation, logspace),
        quantile_source=_term_source(q_term, "p99.9 |error|", n_cases, floor_text, accumulation, logspace),
    )


def _largest_term(terms: Mapping[str, float]) -> tuple[str, float]:
    name = max(terms, key=lambda k: terms[k])
    value = terms[name]
    return (name, value) if value > 0 else ("floor", 0.0)


def _term_source(term: str, figure: str, n_cases: int, floor_text: str, accumulation: AccumulationBound,
                 logspace: LogspaceBound = LogspaceBound()) -> str:
    """The threshold's source: which term set the budget, in words."""
    if term == "logspace":
        return (f"calibrated: float32 log-space statistic bound (exp(x - lse) with lse rounded at the inputs' "
                f"magnitude {logspace.magnitude:.3g}: expm1({LOGSPACE_UNITS:g} u |x|) x min(|truth|, 1)) + {floor_text}")
    if term == "accumulation":
        return (f"calibrated: float32-accumulation bound (Higham gamma_n model, fan-in {accumulation.fan_in}, "
                f"any summation order) + {floor_text}")
    if term == "floor":
        return f"calibrated: {floor_text} (the eager baseline is exact here)"
    k = K_RMSE if figure == "RMSE" else K_QUANTILE
    what = {"baseline": f"baseline {figure} in this case", "pooled": f"median baseline {figure} over {n_cases} cases",
            "sensitivity": f"input-perturbation sensitivity {figure} (ill-conditioned here)"}[term]
    return f"calibrated: {k:g} x {what} + {floor_text}"


@dataclass(frozen=True)
class CaseVerdict:
    passed: bool
    reasons: tuple[str, ...]
    stats: tuple[OutputStats, ...]
    budgets: tuple[OutputBudget, ...]
    ratio: float = math.inf  # worst candidate/budget ratio over the judged figures (inf: structural failure)
    # Why the case could not be judged ('' when it was): out of memory while another process held the GPU
    # (opgate.gpu.judge.oom). Such a case neither passes nor fails; `passed` is False so nothing counts it as passing.
    not_judged: str = ""

    @property
    def worst_ratio(self) -> float:
        return self.ratio


def _ratio(value: float, budget: float) -> float:
    if value == 0:
        return 0.0
    return value / budget if budget > 0 else math.inf


def judge_case(candidates: Sequence[Any], truths: Sequence[Any], budgets: Sequence[OutputBudget],
               out_dtypes: Sequence[str], baseline_lost: Sequence[Any | None],
               quantized: Mapping[str, Any] | None = None, unwritten: Sequence[int] | None = None,
               undefined: Sequence[Any | None] | None = None, nan_policy: str = "propagate",
               extra_atol: float = 0.0, unwritten_spans: Sequence[tuple[int, int]] | None = None,
               nan_for_infinity: bool = False) -> CaseVerdict:
    """Compare every output of one case with the truth and judge it against its budget (nan_for_infinity:
    compare_output's)."""
    import dataclasses

    names = output_names(len(truths))
    reasons: list[str] = []
    all_stats: list[OutputStats] = []
    if len(candidates) != len(truths):
        reasons.append(f"returned {len(candidates)} output(s), the reference returns {len(truths)}")
        return CaseVerdict(False, tuple(reasons), (), tuple(budgets))
    ratios: list[float] = [0.0]
    for i, (name, cand, truth, budget, out_dtype) in enumerate(zip(names, candidates, truths, budgets, out_dtypes)):
        q = quantized if quantized and not dt.is_float(out_dtype) else None
        cand = where_compared(cand)  # a large output on a GPU is judged there, the truth joining it
        truth = on_device_of(cand, truth)
        stats = compare_output(cand, truth, out_dtype, name, baseline_lost=baseline_lost[i], quantized=q,
                               unwritten=(unwritten[i] if unwritten else 0),
                               undefined=(undefined[i] if undefined else None), nan_policy=nan_policy,
                               nan_for_infinity=nan_for_infinity)
        if extra_atol and not budget.is_override:  # the FTZ re-judgement's allowance (deviations.py)
            budget = dataclasses.replace(budget, rmse=budget.rmse + extra_atol, quantile=budget.quantile + extra_atol)
        label = "" if len(truths) == 1 else f"{name}: "
        if stats.problem:
            reasons.append(f"{label}{stats.problem}")
            all_stats.append(stats)
            ratios.append(math.inf)
            continue
        if budget.is_override:
            mism = count_exceeding(cand, truth, budget.atol or 0.0, q, rtol=budget.rtol or 0.0)
            ratios.append(_elementwise_ratio(cand, truth, budget.atol or 0.0, budget.rtol or 0.0, q))
        else:
            mism = count_exceeding(cand, truth, budget.quantile, q) if math.isfinite(budget.quantile) else 0
        if budget.exact_mismatches >= 0:
            mism = stats.exact_mismatches
        stats = dataclasses.replace(stats, mismatches=mism)
        all_stats.append(stats)
        if stats.unwritten:
            span = unwritten_spans[i] if unwritten_spans and i < len(unwritten_spans) else (-1, -1)
            where = f" (flat indices {span[0]}..{span[1]} of {stats.numel})" if span[0] >= 0 else ""
            reasons.append(f"{label}{stats.unwritten} element(s) never written (opgate's poison survived two calls "
                           f"with different poison){where}")
        computed_nonfinite = max(0, stats.nonfinite_unexpected - stats.unwritten)  # unwritten poison is NaN too
        if computed_nonfinite:
            reasons.append(f"{label}{computed_nonfinite} NaN/Inf where the truth is finite")
        if stats.nonfinite_missed:
            reasons.append(f"{label}{stats.nonfinite_missed} element(s) where the truth is NaN/Inf (or overflows "
                           f"{out_dtype}) and the result is not the same (NaN for NaN, an infinity of its sign)")
        if stats.unwritten or stats.nonfinite_unexpected or stats.nonfinite_missed:
            ratios.append(math.inf)
        if budget.is_override:
            if mism:
                reasons.append(f"{label}{mism} element(s) exceed atol {budget.atol:g} + rtol {budget.rtol:g} x |truth|")
            continue
        if budget.exact_mismatches >= 0:
            ratios.append(_ratio(stats.exact_mismatches, budget.exact_mismatches)
                          if budget.exact_mismatches else (math.inf if stats.exact_mismatches else 0.0))
            if stats.exact_mismatches > budget.exact_mismatches:
                reasons.append(f"{label}{stats.exact_mismatches} element(s) differ (budget {budget.exact_mismatches})")
            continue
        if correctly_rounded(stats, out_dtype, q):
            continue  # the truth rounded to the dtype, element for element: no implementation can do better
        if budget.off_by_more_than_one >= 0 and stats.off_by_more_than_one > budget.off_by_more_than_one:
            reasons.append(f"{label}{stats.off_by_more_than_one} element(s) off by more than one quantum "
                           f"(budget {budget.off_by_more_than_one})")
        ratios.extend([_ratio(stats.rmse, budget.rmse), _ratio(stats.quantile_abs, budget.quantile)])
        if budget.off_by_more_than_one >= 0 and stats.off_by_more_than_one:
            ratios.append(_ratio(stats.off_by_more_than_one, budget.off_by_more_than_one))
        if stats.rmse > budget.rmse:
            reasons.append(f"{label}RMSE {stats.rmse:.3g} > budget {budget.rmse:.3g}")
        if stats.quantile_abs > budget.quantile:
            reasons.append(f"{label}p99.9 |error| {stats.quantile_abs:.3g} > budget {budget.quantile:.3g}")
        if budget.elements:
            beyond, worst = _componentwise(cand, truth, budget.elements, extra_atol)
            if worst is not None:
                ratios.append(worst.ratio)
            if beyond and worst is not None:
                reasons.append(f"{label}{beyond}/{len(budget.elements)} sampled element(s) beyond their own bound; "
                               f"worst at flat index {worst.index}: error {worst.error:.3g} > budget "
                               f"{worst.allowed:.3g} (truth {worst.truth:.3g}, componentwise)")
    return CaseVerdict(not reasons, tuple(reasons), tuple(all_stats), tuple(budgets), max(ratios))


def correctly_rounded(stats: OutputStats, out_dtype: str, quantized: Mapping[str, Any] | None) -> bool:
    """Whether a float output equals its float64 truth rounded to the dtype on every element (ulp distance 0),
    with no NaN/Inf or unwritten element: the best answer the dtype holds, whatever eager managed. A budget
    below it (eager NaN on a whole output leaves only the floor) must not fail it."""
    return (dt.is_float(out_dtype) and not quantized and stats.compared > 0 and stats.ulp_max == 0.0
            and not (stats.unwritten or stats.nonfinite_unexpected or stats.nonfinite_missed))


@dataclass(frozen=True)
class ElementError:
    index: int
    error: float
    allowed: float
    truth: float

    @property
    def ratio(self) -> float:
        return _ratio(self.error, self.allowed)


def _componentwise(candidate: Any, truth: Any, elements: Sequence[Sequence[float]],
                   extra_atol: float) -> tuple[int, ElementError | None]:
    """How many sampled elements exceed their allowance, and the worst one (by ratio). Elements where either
    side is not finite are left to the NaN/Inf checks."""
    import torch

    kept = [(int(index), allowed) for index, allowed in elements if int(index) < candidate.numel()]
    where = torch.tensor([index for index, _ in kept], dtype=torch.long, device=candidate.device)
    # only the sampled elements come to the host, in one copy each side
    c = candidate.detach().reshape(-1)[where].to(torch.float64).tolist()
    t = truth.reshape(-1)[where.to(truth.device)].to(torch.float64).tolist()
    beyond, worst = 0, None
    for (index, allowed), ci, ti in zip(kept, c, t):
        if not (math.isfinite(ci) and math.isfinite(ti)):
            continue
        element = ElementError(index, abs(ci - ti), float(allowed) + extra_atol, ti)
        beyond += element.error > element.allowed
        if worst is None or element.ratio > worst.ratio:
            worst = element
    return beyond, worst


def _elementwise_ratio(candidate: Any, truth: Any, atol: float, rtol: float,
                       quantized: Mapping[str, Any] | None) -> float:
    """max |e| / (atol + rtol |truth|) over elements where both are finite (the user override's measure)."""
    import torch

    from opgate.verify.compare import dequantize

    if quantized and not candidate.dtype.is_floating_point:
        c, t = dequantize(candidate, quantized), dequantize(truth, quantized)
    else:
        c, t = candidate.to(torch.float64), truth.to(torch.float64)
    both = torch.isfinite(c) & torch.isfinite(t)
    err = (c - t).abs()[both]
    if err.numel() == 0 or not bool((err > 0).any()):
        return 0.0
    allowed = atol + rtol * t.abs()[both]
    return float(torch.where(err > 0, err / allowed, torch.zeros_like(err)).max())  # err/0 -> inf


def budgets_for_case(op: Operator, dtype: str, case: Case, truth: Sequence[Any], baseline: Sequence[Any],
                     pooled_rmse: Sequence[float], pooled_quantile: Sequence[float],
                     n_cases: int, pooled_rho: Sequence[float] = ()) -> tuple[list[OutputBudget], list[Any], list[str]]:
    """Budget of one case outside the plan (a shrunk or replayed case), using the plan's pooled figures,
    so it is judged exactly like the planned cases. Returns budgets, baseline-non-finite masks, out dtypes."""
    names = output_names(len(truth))
    override = user_override(op, dtype)
    budgets, masks, out_dtypes = [], [], []
    bounds = CaseBounds.of(op, case, dtype, truth)
    for o, (name, t, b) in enumerate(zip(names, truth, baseline)):
        out_dtype = dt.dtype_name(b.dtype)
        quantized = _quantized_for(op.quantized, b)
        mask = baseline_lost_mask(t, b)
        stats = compare_output(b, t, out_dtype, name, baseline_lost=mask, quantized=quantized)
        rmse_pool = pooled_rmse[o] if o < len(pooled_rmse) else 0.0
        q_pool = pooled_quantile[o] if o < len(pooled_quantile) else 0.0
        rho_pool = pooled_rho[o] if o < len(pooled_rho) else 0.0
        budgets.append(bounds.budget(o, stats, t, b, rmse_pool, q_pool, n_cases, override, quantized, rho_pool))
        masks.append(mask if bool(mask.any()) else None)
        out_dtypes.append(out_dtype)
    return budgets, masks, out_dtypes
