"""A forward error bound for what a correct implementation may return, whatever order it sums in.

PyTorch eager on the CPU accumulates float32 reductions in double, so its error is far below what a correct
GPU kernel (float32 accumulation, any blocking, any order) can reach. A budget of "2x eager" then fails correct
kernels: a float32 blockwise cumsum on constant rows, a Welford layer norm at large magnitudes. This module gives
the budget a term no correct implementation can exceed.

The bound (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., SIAM 2002, ch. 3-4): an algorithm
whose result is the exact result of inputs each perturbed by at most gamma_n = n*u / (1 - n*u) relative (the
backward error of recursive, pairwise or blocked summation of n terms in any order is gamma_{n-1}; of a dot
product of length n, gamma_n) has forward error, to first order,

    |y_computed - y| <= gamma_n * sum_j |dy/dx_j| * |x_j|

i.e. the componentwise condition number of y times the backward error. opgate evaluates the right-hand side
exactly for sampled output elements with reverse-mode autograd of the float64 reference (one row of the
Jacobian per sampled element), taking n = the element's fan-in (how many inputs it depends on: the reduction
length the op performs, found from the Jacobian's non-zeros) + EXTRA_OPERATIONS, and u = the unit roundoff
of the accumulation type (float32 for every dtype but float64, which is what production kernels and PyTorch's
own CUDA kernels accumulate in for float32/float16/bfloat16).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Sequence

from opgate.verify.compare import finite_everywhere, selected

# Unit roundoff of the type a correct kernel accumulates in, per dtype under test.
ACCUMULATION_ROUNDOFF: dict[str, float] = {"float64": 2.0**-53}
DEFAULT_ACCUMULATION_ROUNDOFF = 2.0**-24  # float32 accumulation (fp32, fp16, bf16, fp8 I/O)
# Per-element operations beyond the reduction: a scale, a shift, an exp/erf/rsqrt of a few ulp each (CUDA's
# fast-math __expf is 2 + 1.17|x| ulp, but that grows with the argument, which the condition term already
# carries), a division. 16 covers the longest elementwise chains of the common ops.
EXTRA_OPERATIONS = 16
# Partial sums of random-sign terms reach a few standard deviations of their typical sqrt(i) s somewhere in a
# long row; 4 keeps the model above what any row of the plan showed (docs/verify-method.md).
SPREAD_SIGMAS = 4.0
RANDOM_SAMPLES = 12  # output elements drawn at random: their RMS bound scales the RMSE budget
LARGEST_SAMPLES = 4  # plus the elements of largest |truth|: where p99.9 errors sit
# plus the elements of smallest |truth|: where a cancellation or a low-precision intermediate loses every digit while
# the case's RMS hides it (a confident cross-entropy row's loss of 1e-4 beside losses of 20; a suffix sum after the
# 1e8 of its row). They are judged one by one (the componentwise check, calibrate.element_allowances), not pooled.
SMALLEST_SAMPLES = 4
# Seconds of reverse passes one output of one case may take before its samples are thinned: each sample costs one
# pass, and a reference whose second derivative PyTorch loops per group (a depthwise convolution's double backward
# runs one convolution per channel: fla_short_conv.grad at 65535 channels, 1.3-1.8 s a pass on the H200 host's GPU
# and about as long on its CPU) made one plan cost minutes per case. A thinned output keeps at least
# MIN_THINNED_SAMPLES (random first cut; at least one largest and one smallest |truth| kept) and says so
# (AccumulationBound.thinned_from). At 20 samples this thins only outputs whose single pass takes over 0.4 s.
OUTPUT_PASSES_S = 8.0
MIN_THINNED_SAMPLES = 4


@dataclass(frozen=True)
class SampledElement:
    """One sampled output element: its flat index, its accumulation bound, and sum_j |dy/dx_j * x_j| (the
    magnitude its first-order terms carry, which a cancellation can leave far above |y|)."""

    index: int
    bound: float
    magnitude: float


@dataclass(frozen=True)
class AccumulationBound:
    """Per output: the bound's RMS over random elements, its maximum over all sampled ones, the largest fan-in."""

    rmse: float = 0.0
    quantile: float = 0.0
    fan_in: int = 0
    roundoff: float = 0.0
    # every sampled element whose Jacobian row is finite and not zero (an element that no input moves, such as a
    # rounding or a ReLU's zero, has no componentwise bound); empty when an input is not finite
    elements: tuple[SampledElement, ...] = ()
    # how many elements the output would have sampled, when slow reverse passes thinned them (OUTPUT_PASSES_S); 0
    # when every one was
    thinned_from: int = 0
    # the reference is a norm alone (NORMALIZED_IN_DTYPE): a half-precision kernel may form its terms in the dtype,
    # as the models' own definitions do (calibrate.FORMED_IN_DTYPE)
    formed_in_dtype: bool = False

    @property
    def present(self) -> bool:
        return self.quantile > 0.0


def gamma(n: int, roundoff: float) -> float:
    """Higham's gamma_n = n u / (1 - n u); infinite once n u reaches 1 (no bound)."""
    nu = n * roundoff
    return nu / (1.0 - nu) if nu < 1.0 else math.inf


def _quantum(values: Any) -> Any:
    """Per element: the largest power of two that divides it (its lowest set mantissa bit); inf for 0."""
    import torch

    mantissa, exponent = torch.frexp(values.abs())
    integer = (mantissa * 2.0**53).to(torch.int64)  # exact: float64 mantissas have 53 bits
    lowest = (integer & -integer).to(torch.float64)
    quantum = torch.ldexp(lowest, (exponent - 53).to(torch.int64))
    return torch.where(values != 0, quantum, torch.full_like(values, math.inf))


def first_inexact_step(n: int, mean_abs: float, spread: float, threshold: float) -> int:
    """The first addition (1-based) whose partial sum can reach `threshold` in magnitude under the model's envelope
    i|m| + SPREAD_SIGMAS sqrt(i) s; n + 1 when none does."""
    def envelope(i: int) -> float:
        return i * mean_abs + SPREAD_SIGMAS * math.sqrt(i) * spread

    if envelope(n) < threshold:
        return n + 1
    low, high = 1, n
    while low < high:
        mid = (low + high) // 2
        if envelope(mid) >= threshold:
            high = mid
        else:
            low = mid + 1
    return low


def element_bounds(terms: Any, roundoff: float) -> list[float]:
    """The bound for each sampled output element (one row of `terms` each) from its first-order terms
    c_j = dy/dx_j * x_j (zeros are inputs it does not depend on).

    Each of the n additions of a reduction errs by at most u |partial sum|. In any order that does not look at
    the data (sequential, blocked, pairwise, split-K) a partial sum of i terms of mean m and spread s is about
    i|m| + sqrt(i) s, so the accumulated error is at most about u (n(n+1)/2 |m| + SPREAD_SIGMAS (2/3) n^1.5 s):
    a constant row (s = 0) takes the systematic n^2 growth a sequential float32 sum really shows, random-sign
    data the sqrt(n) growth. EXTRA_OPERATIONS u sum|c_j| covers the per-element arithmetic. The result never
    exceeds the rigorous gamma_{n+EXTRA} sum|c_j|.

    Additions that are exact cost nothing: when every term is a multiple of a power of two q (float16 values carry
    11 significant bits, bfloat16 8), every partial sum below q/u in magnitude is representable in the accumulation
    type, in any order. Only the additions from the first one whose partial sum can reach q/u are charged
    (first_inexact_step). A float32 sum of 16385 equal float16 values is exact; charging each addition u|P_i| there
    admitted a per-lane float16 accumulator 11x less accurate than a float32 one (truth corpus, rowsum). For
    float32 inputs (24-bit mantissas) q/u is within a few terms of |c|: nothing changes."""
    return [row_bound(row[row != 0], roundoff) for row in terms]


def row_bound(terms: Any, roundoff: float) -> float:
    """element_bounds for one element from its non-zero terms only (a row op's element depends on one row: the
    zeros of the other rows cost nothing, and _quantum is the expensive part)."""
    return RowTerms.of([terms], roundoff).bound


@dataclass(frozen=True)
class RowTerms:
    """One sampled element's first-order terms c_j, reduced to what its bound needs: how many are non-zero (its
    fan-in), sum |c_j|, and the bound itself (element_bounds)."""

    count: int
    magnitude: float
    bound: float

    @classmethod
    def of(cls, parts: Sequence[Any], roundoff: float) -> "RowTerms":
        """From the terms in one or more flat float64 vectors, zeros included (an input the element does not depend
        on costs nothing). Every figure is a reduction over the vectors as they are: no vector of the non-zero terms
        is gathered (on fla's linear cross-entropy gradient, 4.2 M terms per element, gathering them and three passes
        over the copy cost more than the reverse pass itself)."""
        import torch

        count = sum(int(torch.count_nonzero(part)) for part in parts)
        if count == 0:
            return cls(0, 0.0, 0.0)
        magnitude = sum(float(torch.linalg.vector_norm(part, 1)) for part in parts)
        mean = sum(float(part.sum()) for part in parts) / count
        squares = sum(float(torch.dot(part, part)) for part in parts)
        spread = math.sqrt(max(squares / count - mean * mean, 0.0))
        first = _first_inexact_in(parts, count, abs(mean), spread, roundoff)
        return cls.charged(count, magnitude, mean, spread, first, roundoff)

    @staticmethod
    def figures(part: Any) -> list[Any]:
        """One flat vector's figures as 0-d float64 tensors, left where the vector is (no read-back): its non-zero
        count, sum |c|, sum c, sum c^2 and smallest quantum (inf when all are zero). RowTerms.from_figures reduces
        them exactly as `of` does the vectors."""
        import torch

        if part.numel() == 0:
            zero = torch.zeros((), dtype=torch.float64, device=part.device)
            return [zero, zero, zero, zero, torch.full((), math.inf, dtype=torch.float64, device=part.device)]
        return [torch.count_nonzero(part).to(torch.float64), torch.linalg.vector_norm(part, 1), part.sum(),
                torch.dot(part, part), _quantum(part).min()]

    @classmethod
    def from_figures(cls, per_part: Sequence[Sequence[float]], roundoff: float) -> "RowTerms":
        """`of` from each part's figures (RowTerms.figures, read back): the smallest quantum over every term, where
        `of` first looks at a sample of them (the same first inexact addition either way: see QUANTUM_SAMPLE)."""
        count = sum(int(f[0]) for f in per_part)
        if count == 0:
            return cls(0, 0.0, 0.0)
        magnitude = sum(f[1] for f in per_part)
        mean = sum(f[2] for f in per_part) / count
        squares = sum(f[3] for f in per_part)
        spread = math.sqrt(max(squares / count - mean * mean, 0.0))
        least = min(f[4] for f in per_part)
        first = first_inexact_step(count, abs(mean), spread, least / roundoff) if math.isfinite(least) else 1
        return cls.charged(count, magnitude, mean, spread, first, roundoff)

    @classmethod
    def charged(cls, count: int, magnitude: float, mean: float, spread: float, first: int,
                roundoff: float) -> "RowTerms":
        before = first - 1  # additions 1 .. first-1 are exact: charge only the rest
        modelled = roundoff * modelled_units(count, abs(mean), spread, magnitude, before)
        rigorous = gamma(count - before + EXTRA_OPERATIONS, roundoff) * magnitude
        return cls(count, magnitude, min(modelled, rigorous))


def modelled_units(count: int, mean_abs: Any, spread: Any, magnitude: Any, before: int = 0,
                   extra: int = EXTRA_OPERATIONS) -> Any:
    """The modelled bound of a sum of `count` terms (mean |m|, spread s, sum of |terms| `magnitude`) in units of the
    roundoff: a constant row's systematic growth, random-sign partial sums' SPREAD_SIGMAS sqrt(i) s, and `extra`
    operations beyond the sum. Plain arithmetic: floats, or tensors of per-row figures (_decomposed_norm)."""
    return ((count * (count + 1) - before * (before + 1)) / 2 * mean_abs
            + SPREAD_SIGMAS * (2.0 / 3.0) * (count**1.5 - before**1.5) * spread
            + extra * magnitude)


# _quantum is the expensive part of row_bound (a gradient's element depends on millions of terms: fla's linear
# cross-entropy's dW, 4.2 M). The smallest quantum only matters when it makes the first additions exact, so it is
# first taken over this many terms: when they already make the first addition inexact, the minimum over all terms
# (never larger) does too, and the rest is not looked at. The result is the same either way.
QUANTUM_SAMPLE = 4096
# A leaf's gradient with fewer than 1/SPARSE_FRACTION of its entries non-zero is gathered before it is reduced
# (_sampled_terms): the gather's two passes cost less than the reductions' passes over the zeros. The same
# threshold already picks the gathered quantum in _first_inexact_in.
SPARSE_FRACTION = 4


def _first_inexact_addition(terms: Any, count: int, mean_abs: float, spread: float, roundoff: float) -> int:
    """first_inexact_step at the smallest quantum of the non-zero `terms` (see QUANTUM_SAMPLE)."""
    return _first_inexact_in([terms], count, mean_abs, spread, roundoff)


def _first_inexact_in(parts: Sequence[Any], count: int, mean_abs: float, spread: float, roundoff: float) -> int:
    """_first_inexact_addition over the terms of several flat vectors (a zero's quantum is inf: it never sets the
    minimum). The sample is each vector's first QUANTUM_SAMPLE entries and as many spread evenly over it (an element
    of row m of a matrix input depends on that row alone: the first entries of the vector are then zeros); a sample
    with no non-zero term says nothing."""
    def first_at(quantum: float) -> int:
        return first_inexact_step(count, mean_abs, spread, quantum / roundoff) if math.isfinite(quantum) else 1

    if sum(int(part.numel()) for part in parts) > QUANTUM_SAMPLE:
        sample = [piece for part in parts if part.numel()
                  for piece in (part[:QUANTUM_SAMPLE], part[::max(1, int(part.numel()) // QUANTUM_SAMPLE)])]
        least = min(float(_quantum(piece).min()) for piece in sample)
        if math.isfinite(least) and first_at(least) == 1:
            return 1
    if SPARSE_FRACTION * count < sum(int(part.numel()) for part in parts):  # as _few, over several vectors
        # few non-zero terms (an element of one row of a large input, which the sample missed): the quantum of those
        # alone, gathered in two passes, instead of _quantum's dozen passes over every zero (the same minimum)
        parts = [part[part != 0] for part in parts]
    return first_at(min(float(_quantum(part).min()) for part in parts if part.numel()))


# --- The intermediates' rounding: what the values an output is formed from imply --------------------------------
#
# The first-order terms c_j = dy/dx_j x_j see the inputs only. An output formed from intermediates much larger than
# itself carries their rounding: a cross-entropy of one class is lse - x_label (+ z lse^2), 0 in exact arithmetic and
# ~u|x| in any float32 kernel that rounds lse and x_label differently, while dy/dx (through z lse^2 alone) says the
# element is tiny and well conditioned. The standard first-order analysis charges every operation of the reference's
# own computation: sum_k u |t_k| |dy_i/dt_k| over its intermediate values t_k (Higham, ch. 2-3). opgate records the
# reference's intermediates (the outputs of the torch functions it calls, less those that only move or select
# values: views, copies, indexing, max, where ...) and takes dy_i/dt_k in the same reverse pass as the Jacobian row.
# A reference written as one op (F.softplus, a @ b) has no intermediates: nothing changes there. Two kinds of one-op
# call hide a statistic every kernel rounds, and are decomposed so that it becomes one: a log-softmax or
# cross-entropy's row logsumexp (LOGSPACE_FUNCTIONS) and a layer or group norm's mean (NORM_FUNCTIONS).
EXACT_FUNCTIONS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze", "transpose", "t",
    "permute", "movedim", "swapaxes", "swapdims", "expand", "expand_as", "broadcast_to", "contiguous", "clone",
    "detach", "__getitem__", "select", "narrow", "index_select", "gather", "take_along_dim", "masked_select",
    "cat", "concat", "concatenate", "stack", "hstack", "vstack", "flip", "fliplr", "flipud", "roll", "chunk",
    "split", "tensor_split", "unbind", "repeat", "repeat_interleave", "tile", "neg", "negative", "__neg__", "abs",
    "absolute", "max", "amax", "min", "amin", "maximum", "minimum", "clamp", "clamp_min", "clamp_max", "clip", "relu",
    "where", "masked_fill", "sort", "topk", "to", "type", "float", "double", "half", "bfloat16", "type_as",
    "zeros_like", "ones_like", "full_like", "empty_like", "diagonal", "tril", "triu", "pad", "__setitem__",
    "requires_grad_", "argmax", "argmin", "sign", "T", "mT", "real", "contiguous",
})


MAX_INTERMEDIATES = 256
# Functions every kernel computes relative to a row logsumexp L of their input (z - L, or L - z_label): their outputs
# carry about u|L| of rounding even where their value is 0 (a cross-entropy over one class, a log-softmax of one
# column), which neither the value nor the inputs' terms show. A reference written with F.cross_entropy has no lse
# intermediate of its own (fla's soft-capped z-loss cross-entropy at V = 1, library corpus): such an output is
# charged at the magnitude |L| (reduced as the function reduces), not at its own.
LOGSPACE_FUNCTIONS = frozenset({"cross_entropy", "log_softmax"})
# Norms that subtract a mean before they scale by 1/sqrt(var + eps). A float32 kernel's mean is a float32 sum, off by
# a few ulp of the row's values, and x - mean carries that error wholesale: in a (near-)constant row it is all of
# x - mean, multiplied by 1/sqrt(eps) (316 at eps = 1e-5). The inputs' first-order terms cannot show it (a norm is
# shift-invariant: its Jacobian sends a uniform shift to 0), and it stays hidden while the norm is the output, whose
# own terms are larger; a layer norm followed by a linear layer was failed on such a row (held-out corpus,
# mamba-ssm's layer_norm_linear_fn: 1.8x its budget; a textbook float32 layer norm failed all 12 such cases). The
# mean is charged with what a float32 sum of its n terms x/n may lose in any order (modelled_units, the inputs' own
# model) and MEAN_EXTRA_OPERATIONS roundings more, not with one rounding. The variance's rounding is relative to
# itself and is not amplified: not charged.
NORM_FUNCTIONS = frozenset({"layer_norm", "group_norm"})
# Norms whose normalized value the models that use them round to the activations' dtype before the affine:
# transformers' LlamaRMSNorm returns weight * x_hat.to(dtype) (Llama's own definition, and T5's), and its eager
# gradient multiplies the upstream gradient by that rounded x_hat in the dtype. A reference that is such a norm alone
# (nothing else rounds in it) lets a half-precision kernel form each term once in the dtype; a fused F.rms_norm
# rounds neither, and against it the formula's gradients failed in float16 (4.5x) and bfloat16 (4.9x).
NORMALIZED_IN_DTYPE = NORM_FUNCTIONS | {"rms_norm"}
MEAN_EXTRA_OPERATIONS = 2  # the division by n and the subtraction x - mean


def _recording_intermediates() -> Any:
    """A TorchFunctionMode collecting every differentiable float tensor a torch function returns, except those of
    EXACT_FUNCTIONS (their values are the inputs', moved or selected: no rounding)."""
    import torch
    from torch.overrides import TorchFunctionMode

    class Recorder(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.tensors: list[Any] = []
            self.magnitudes: dict[int, Any] = {}  # id(tensor) -> the magnitude its rounding scales with
            self.norms = 0  # calls of NORMALIZED_IN_DTYPE functions
            self.other_roundings = 0  # calls of any other function that rounds (not EXACT_FUNCTIONS)

        @property
        def norm_alone(self) -> bool:
            return self.norms > 0 and self.other_roundings == 0

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            result = func(*args, **(kwargs or {}))
            name = getattr(func, "__name__", "")
            if name in EXACT_FUNCTIONS or name.endswith("_") and name[:-1] in EXACT_FUNCTIONS:
                return result
            if name in LOGSPACE_FUNCTIONS:
                decomposed = _decomposed_logspace(name, result, args, kwargs or {})
                if decomposed is not None:  # the same values, formed from an explicit row statistic L
                    result, statistic = decomposed
                    self.tensors.append(statistic)
                    self.tensors.append(result)
                    return result
            if name in NORM_FUNCTIONS:
                normalised = _decomposed_norm(name, result, args, kwargs or {})
                if normalised is not None:  # the same values, with the mean a node of their graph
                    self.norms += 1
                    result, mean, charged = normalised
                    self.tensors.append(mean)
                    self.magnitudes[id(mean)] = charged
                    self.tensors.append(result)
                    return result
            if name in NORMALIZED_IN_DTYPE:
                self.norms += 1
            for value in (result if isinstance(result, (tuple, list)) else (result,)):
                if (isinstance(value, torch.Tensor) and value.dtype == torch.float64 and value.grad_fn is not None
                        and value.numel() > 0):
                    if name not in NORMALIZED_IN_DTYPE and name != "grad":  # grad: a gradient twin's own outputs
                        self.other_roundings += 1  # a value of the reference's graph formed by another function
                    self.tensors.append(value)
                    if name in LOGSPACE_FUNCTIONS:
                        magnitude = _logspace_magnitude(name, value, args, kwargs or {})
                        if magnitude is not None:
                            self.magnitudes[id(value)] = magnitude
            return result

        def magnitude_of(self, tensor: Any) -> Any:
            return self.magnitudes.get(id(tensor), tensor.detach().abs())

    return Recorder()


def _argument(args: Sequence[Any], kwargs: dict[str, Any], position: int, name: str, default: Any) -> Any:
    return args[position] if len(args) > position else kwargs.get(name, default)


def _decomposed_logspace(name: str, result: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any | None:
    """(the same output formed as x - L from an explicit L = logsumexp(x), L) for a plain log_softmax or
    cross_entropy call; None for any other form, or when the decomposed values differ from the call's own.

    Every fused kernel computes these from a float32 row statistic L, and so do their gradients (p = exp(x - L)):
    with L a node of the reference's graph, the intermediates' term charges each output, and each gradient
    element, u|L| times its sensitivity to L (|g| p for a cross-entropy gradient g(p - onehot)). F.cross_entropy
    hides L: a confident row's gradient of -6e-7 is 0 in any float32 kernel at |L| = 31, and its budget, formed from
    the element's own size, failed a correct kernel (truth corpus ce_backward.py, standard budget)."""
    import torch
    import torch.nn.functional as F

    logits = _argument(args, kwargs, 0, "input", None)
    if not isinstance(logits, torch.Tensor) or logits.dtype != torch.float64 or logits.dim() == 0:
        return None
    try:
        if name == "log_softmax":
            dim = _argument(args, kwargs, 1, "dim", None)
            if not isinstance(dim, int) or _argument(args, kwargs, 3, "dtype", None) is not None:
                return None
            statistic = torch.logsumexp(logits, dim, keepdim=True)
            value = logits - statistic
        else:
            target = _argument(args, kwargs, 1, "target", None)
            weight = _argument(args, kwargs, 2, "weight", None)
            ignore_index = _argument(args, kwargs, 4, "ignore_index", -100)
            reduction = _argument(args, kwargs, 6, "reduction", "mean")
            smoothing = float(_argument(args, kwargs, 7, "label_smoothing", 0.0))
            if (not isinstance(target, torch.Tensor) or target.dtype.is_floating_point or weight is not None
                    or _argument(args, kwargs, 3, "size_average", None) is not None
                    or _argument(args, kwargs, 5, "reduce", None) is not None):
                return None
            class_dim = 1 if logits.dim() > 1 else 0
            statistic = torch.logsumexp(logits, class_dim, keepdim=True)
            log_p = logits - statistic
            value = F.nll_loss(log_p, target, ignore_index=ignore_index, reduction=reduction)
            if smoothing > 0.0:
                kept = (target != ignore_index).to(logits.dtype)
                smooth = -log_p.mean(class_dim) * kept
                smooth = (smooth.sum() / kept.sum() if reduction == "mean"
                          else smooth.sum() if reduction == "sum" else smooth)
                value = (1.0 - smoothing) * value + smoothing * smooth
    except Exception:  # an argument form the decomposition does not know: the call's own result stays
        return None
    if not isinstance(result, torch.Tensor) or value.shape != result.shape or not torch.allclose(
            value.detach(), result.detach(), rtol=1e-10, atol=1e-12, equal_nan=True):
        return None
    return value, statistic


def _decomposed_norm(name: str, result: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any | None:
    """(the call's output with its mean made a node of the graph, that mean, what its rounding is charged at) for a
    plain F.layer_norm or F.group_norm call (NORM_FUNCTIONS); None for any other form, or when the values recomputed
    from the mean differ from the call's own.

    The output stays the call's own, bit for bit, and so does its Jacobian with respect to the inputs: the mean is a
    separate leaf joined by a term that is zero in value, -(m - m) rstd w, whose derivative with respect to m is the
    norm's own, -rstd w (the variance's derivative with respect to the mean is 0 at the exact mean)."""
    import torch

    x = _argument(args, kwargs, 0, "input", None)
    if (not isinstance(x, torch.Tensor) or x.dtype != torch.float64 or x.numel() == 0
            or not isinstance(result, torch.Tensor) or result.shape != x.shape):
        return None
    weight = _argument(args, kwargs, 2, "weight", None)
    bias = _argument(args, kwargs, 3, "bias", None)
    eps = _argument(args, kwargs, 4, "eps", 1e-5)
    try:
        with torch.no_grad():
            if name == "layer_norm":
                shape = _argument(args, kwargs, 1, "normalized_shape", None)
                shape = (shape,) if isinstance(shape, int) else tuple(shape)
                rows, affine_shape = x.detach(), tuple(x.shape[x.dim() - len(shape):])
            else:  # group_norm: (N, C, *) in G groups of C/G channels, weight and bias per channel
                groups = _argument(args, kwargs, 1, "num_groups", None)
                if not isinstance(groups, int) or x.dim() < 2 or groups <= 0 or x.shape[1] % groups:
                    return None
                rows = x.detach().reshape(x.shape[0], groups, -1)
                shape, affine_shape = (rows.shape[-1],), (x.shape[1],) + (1,) * (x.dim() - 2)
            dims = tuple(range(-len(shape), 0))
            mean = rows.mean(dims, keepdim=True)
            rstd = torch.rsqrt(((rows - mean) ** 2).mean(dims, keepdim=True) + eps)
            scale = (weight.detach().reshape(affine_shape) if weight is not None
                     else torch.ones((), dtype=x.dtype, device=x.device))
            shift = (torch.zeros((), dtype=x.dtype, device=x.device) if bias is None
                     else bias.detach().reshape(affine_shape))
            recomputed = ((rows - mean) * rstd).reshape(x.shape) * scale + shift
            if not bool(torch.isfinite(rstd).all()) or not torch.allclose(
                    recomputed, result.detach(), rtol=1e-8,
                    atol=1e-10 + 2.0**-40 * float(x.abs().max() * rstd.max() * scale.abs().max()), equal_nan=True):
                return None  # a misread argument is off by the values themselves; eps = 0 on a constant row
            count = math.prod(int(rows.shape[d]) for d in dims)
            mean_abs = rows.abs().mean(dims, keepdim=True)
            spread = rows.std(dims, correction=0, keepdim=True) if count > 1 else torch.zeros_like(mean_abs)
            # the terms x_j / n of the mean, in units of the roundoff: the lesser of the model and gamma's n + extra
            charged = torch.minimum(modelled_units(count, mean.abs() / count, spread / count, mean_abs,
                                                   extra=MEAN_EXTRA_OPERATIONS),
                                    (count + MEAN_EXTRA_OPERATIONS) * mean_abs)
        node = mean.clone().requires_grad_(True)
        zero = ((node - node.detach()) * rstd).expand(rows.shape).reshape(x.shape) * scale
        return result - zero, node, charged
    except Exception:  # an argument form the decomposition does not know: the call's own result stays
        return None


def _logspace_magnitude(name: str, output: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any | None:
    """max(|output|, |L|) per output element, L the logsumexp of the input over its class dim (LOGSPACE_FUNCTIONS);
    None when the call's shape is not the plain one."""
    import torch

    logits = args[0] if args else kwargs.get("input")
    if not isinstance(logits, torch.Tensor) or logits.dim() == 0:
        return None
    with torch.no_grad():
        if name == "log_softmax":
            dim = args[1] if len(args) > 1 else kwargs.get("dim")
            if not isinstance(dim, int):
                return None
            statistic = torch.logsumexp(logits.detach(), dim, keepdim=True).abs().expand_as(output)
        else:  # cross_entropy: the class dim is 1 (0 for one unbatched sample), reduced as the loss is
            statistic = torch.logsumexp(logits.detach(), 1 if logits.dim() > 1 else 0).abs()
            reduction = kwargs.get("reduction", args[7] if len(args) > 7 else "mean")
            statistic = statistic.sum() if reduction == "sum" else statistic.mean() if reduction == "mean" else statistic
        if statistic.shape != output.shape:
            return None
        return torch.maximum(statistic, output.detach().abs())


def accumulation_bounds(reference: Any, truth_inputs: Sequence[Any], truths: Sequence[Any], dtype: str,
                        seed: int) -> list[AccumulationBound]:
    """The bound for every output of one case (zero where the reference has no gradient: integer outputs,
    rounding, argmax). `truth_inputs` are the float64 inputs the truth was computed from."""
    import torch

    empty = [AccumulationBound()] * len(truths)
    roundoff = ACCUMULATION_ROUNDOFF.get(dtype, DEFAULT_ACCUMULATION_ROUNDOFF)
    positions = [i for i, v in enumerate(truth_inputs)
                 if isinstance(v, torch.Tensor) and v.dtype == torch.float64 and v.numel() > 0]
    if not positions:
        return empty
    args = list(truth_inputs)
    leaves = []
    for i in positions:
        leaf = truth_inputs[i].detach().clone().requires_grad_(True)
        args[i] = leaf
        leaves.append(leaf)
    recorder = _recording_intermediates()
    try:
        with torch.enable_grad(), recorder:
            result = reference(*args)
    except Exception:  # a reference that cannot run under autograd has no bound; the other terms stay
        return empty
    outputs = list(result) if isinstance(result, (tuple, list)) else [result]
    inputs_finite = all(bool(torch.isfinite(leaf).all()) for leaf in leaves)
    values = [leaf.detach().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0) for leaf in leaves]
    bounds = []
    for index, (out, truth) in enumerate(zip(outputs, truths)):
        if (not isinstance(out, torch.Tensor) or not out.dtype.is_floating_point or out.grad_fn is None
                or out.numel() == 0):
            bounds.append(AccumulationBound())
            continue
        samples, n_smallest = _sample_elements(truth, seed * 31 + index, _smallest_normal(dtype))
        if not samples:
            bounds.append(AccumulationBound())
            continue
        # a reference that loops in Python (one small tensor per row) records thousands: their reverse passes would
        # cost more than the whole calibration, so such a reference gets no intermediates' term
        intermediates = [t for t in recorder.tensors if t is not out] if len(recorder.tensors) <= MAX_INTERMEDIATES else []
        magnitudes = [recorder.magnitude_of(t) for t in intermediates]
        # the first two passes run one at a time, and the faster says what a pass costs: the first can carry a
        # one-off cost (an allocator's or a library's first use, a preempted process on a busy host)
        passes_s, found = [], []
        for sample in samples[:2]:
            began = time.perf_counter()
            one = _sampled_terms(out, leaves, values, [sample], roundoff, intermediates, magnitudes)
            passes_s.append(time.perf_counter() - began)
            found = None if one is None or found is None else found + one
        sampled = len(samples)
        n_random = min(RANDOM_SAMPLES, len(samples) - n_smallest)
        if found is not None and len(samples) > 2:
            kept = _thinned(len(samples), n_random, n_smallest, min(passes_s))
            samples = [samples[k] for k in kept]  # the two computed first are among the kept (_thinned)
            n_random = sum(1 for k in kept if k < n_random)
            n_smallest = sum(1 for k in kept if k >= sampled - n_smallest)
            rest = _sampled_terms(out, leaves, values, samples[2:], roundoff, intermediates, magnitudes)
            found = None if rest is None else found + rest
        # an output a LOGSPACE function returns itself (a reference that is just F.cross_entropy) is formed as
        # L - x_label in any kernel: its own rounding is u|L|, which no intermediate of the reference carries
        # (truth corpus, standard budget: a correct online-softmax loss of 2.1e-7 at |L| = 31 came out 0, an
        # error of a ninth of an ulp of L, against a budget of 1.9e-7)
        own = recorder.magnitudes.get(id(out))
        own_magnitude = own.reshape(-1) if own is not None else None
        if found is None:  # no float input moves this output (a bias gradient, a module's own parameter): no terms
            bounds.append(AccumulationBound())
            continue
        per_element: list[float] = []
        fan_in = 0
        elements: list[SampledElement] = []
        for sample, (terms, row_finite, carried) in zip(samples, found):
            formed = float(own_magnitude[sample]) if own_magnitude is not None else 0.0
            per_element.append(terms.bound + roundoff * (carried + formed))
            fan_in = max(fan_in, terms.count)
            if inputs_finite and row_finite and terms.magnitude > 0 and math.isfinite(per_element[-1]):
                elements.append(SampledElement(sample, per_element[-1], terms.magnitude))
        rms = _stratified_rms(per_element, int(truth.numel()), n_random)
        top = max(per_element[:len(samples) - n_smallest], default=0.0)  # the smallest-|truth| samples judge alone
        thinned_from = sampled if len(samples) < sampled else 0
        if not (math.isfinite(rms) and math.isfinite(top)):
            bounds.append(AccumulationBound(fan_in=fan_in, roundoff=roundoff, thinned_from=thinned_from))
            continue
        bounds.append(AccumulationBound(rms, top, fan_in, roundoff, tuple(elements), thinned_from,
                                        recorder.norm_alone))
    return bounds


def _smallest_normal(dtype: str) -> float:
    """The smallest normal magnitude of the dtype under test (0 for a name torch does not know as a float)."""
    import torch

    kind = getattr(torch, dtype, None)
    return float(torch.finfo(kind).tiny) if isinstance(kind, torch.dtype) and kind.is_floating_point else 0.0


def _thinned(count: int, n_random: int, n_smallest: int, first_pass_s: float) -> list[int]:
    """Which of an output's `count` samples (n_random random ones, then the largest |truth|, then n_smallest
    smallest) to keep when one reverse pass took `first_pass_s` (see OUTPUT_PASSES_S): all of them when they fit;
    else the first of each group, then random, largest and smallest ones in turn, MIN_THINNED_SAMPLES at least.
    The first two samples (computed before this is asked) are always kept."""
    if first_pass_s * count <= OUTPUT_PASSES_S:
        return list(range(count))
    keep = max(MIN_THINNED_SAMPLES, int(OUTPUT_PASSES_S / max(first_pass_s, 1e-9)))
    if keep >= count:
        return list(range(count))
    groups = [list(range(n_random)), list(range(n_random, count - n_smallest)), list(range(count - n_smallest, count))]
    taken = [min(1, len(group)) for group in groups]
    while sum(taken) < keep:
        for g, group in enumerate(groups):
            if taken[g] < len(group) and sum(taken) < keep:
                taken[g] += 1
    return [k for group, n in zip(groups, taken) for k in group[:n]]


def _stratified_rms(per_element: Sequence[float], total: int, n_random: int = RANDOM_SAMPLES) -> float:
    """The RMS of the bound over all `total` elements: the chosen samples (largest and smallest |truth|, after the
    random ones) stand for themselves, the random ones for the rest. The random ones alone missed the one element
    per row whose bound is a million times the others' (a confident row's cross-entropy gradient at the label,
    u|L| p): its share of the RMSE failed a correct kernel at 1.12x (truth corpus ce_backward.py)."""
    random_part = list(per_element[:min(n_random, len(per_element))])
    chosen = list(per_element[len(random_part):])
    if not random_part or total <= 0:
        return 0.0
    rest = max(total - len(chosen), 0)
    mean_square = sum(b * b for b in random_part) / len(random_part)
    return math.sqrt((sum(b * b for b in chosen) + rest * mean_square) / max(total, len(chosen)))


def _sample_elements(truth: Any, seed: int, floor: float = 0.0) -> tuple[list[int], int]:
    """Flat indices: RANDOM_SAMPLES random finite elements, then the LARGEST_SAMPLES of largest |truth|, then the
    SMALLEST_SAMPLES of smallest |truth| at or above `floor` (not already drawn); and how many of those smallest
    ones there are. `floor` is the dtype's smallest normal: a truth that underflows there (softplus at x = -1e4 is
    0 in float64 too) has no componentwise bound, and four such zeros left the elements at x in (-87, -17), where
    a naive log(1 + e^x) returns 0 for a positive truth, unsampled (truth corpus, standard budget)."""
    import torch

    flat = truth.reshape(-1).to(torch.float64)
    finite = torch.nonzero(torch.isfinite(flat)).reshape(-1)
    if finite.numel() == 0:
        return [], 0
    gen = torch.Generator().manual_seed(seed % (2**63 - 1))
    count = min(RANDOM_SAMPLES, int(finite.numel()))
    chosen = finite[torch.randperm(int(finite.numel()), generator=gen)[:count]].tolist()
    magnitude = flat[finite].abs()
    largest = finite[magnitude.topk(min(LARGEST_SAMPLES, int(magnitude.numel()))).indices].tolist()
    samples = chosen + [i for i in largest if i not in chosen]
    normal = magnitude >= floor
    candidates, small = finite[normal], magnitude[normal]
    smallest = candidates[(-small).topk(min(SMALLEST_SAMPLES, int(small.numel()))).indices].tolist()
    smallest = [i for i in smallest if i not in samples]
    return samples + smallest, len(smallest)


def _sampled_terms(out: Any, leaves: Sequence[Any], values: Sequence[Any], samples: Sequence[int], roundoff: float,
                   intermediates: Sequence[Any] = (), magnitudes: Sequence[Any] | None = None,
                   ) -> list[tuple[RowTerms, bool, float]] | None:
    """For every sample s: (its first-order terms c_j = d out.flat[s] / d x_j * x_j over every leaf, reduced to their
    fan-in, magnitude and bound (RowTerms), whether they are all finite, sum_k |t_k| |d out.flat[s] / d t_k| over the
    intermediates t_k (|t_k| or its entry of `magnitudes`): what their rounding carries to it). None when autograd
    cannot differentiate it, or when it depends on no leaf at all: an output can have a graph that reaches none of
    the inputs (the bias gradient of a `.grad` twin, the upstream gradient summed over rows; an nn.Module
    reference's output computed from its own parameters alone). `values`: the leaves' values with non-finite ones
    zeroed.

    One reverse pass per sample: ten times faster than torch.autograd.grad(is_grads_batched=True) on a
    64 x 1024 softmax (vmap over the backward graph), and it needs no batching rule. A leaf's gradient is dense or
    sparse alike for most samples of one output, so each leaf's last sample says how its products are formed
    (`sparse`): a dense one into one buffer per leaf, reused by every sample (a fresh 32 MB vector per pass
    cost its page faults again), reduced as it is (RowTerms.of); a sparse one (an elementwise or row op's element
    depends on a few inputs) gathered to its non-zero entries first, so the reductions read a few values instead
    of the whole input a dozen times."""
    if out.device.type != "cpu":
        return _sampled_terms_on_device(out, leaves, values, samples, roundoff, intermediates, magnitudes)
    return _sampled_terms_per_sample(out, leaves, values, samples, roundoff, intermediates, magnitudes)


def _sampled_terms_per_sample(out: Any, leaves: Sequence[Any], values: Sequence[Any], samples: Sequence[int],
                              roundoff: float, intermediates: Sequence[Any] = (),
                              magnitudes: Sequence[Any] | None = None) -> list[tuple[RowTerms, bool, float]] | None:
    """_sampled_terms on the CPU: each sample's figures read as they are formed, sparse gradients gathered first."""
    import torch

    wrt = list(leaves) + list(intermediates)
    flat_values = [v.reshape(-1) for v in values]
    buffers: list[Any] = [None] * len(flat_values)
    sparse: list[bool | None] = [None] * len(flat_values)  # per leaf, learnt from its samples' gradients
    carriers = [value.detach() for value in (magnitudes if magnitudes is not None else intermediates)]
    sparse_carrier: list[bool | None] = [None] * len(carriers)  # the same, per intermediate
    found: list[tuple[RowTerms, bool, float]] = []
    used = False
    # the reverse pass of out.flat[s] starts from a one-hot of out's shape: one buffer, its 1 moved from sample to
    # sample, instead of the zeros autograd's select backward fills anew for every pass (a tenth of each pass on
    # fla's linear cross-entropy gradient, whose dW has 4.2 M elements; the gradients are the same, bit for bit)
    one_hot = torch.zeros(out.shape, dtype=out.dtype, device=out.device)
    flat_one_hot = one_hot.view(-1)
    try:
        for index in samples:
            flat_one_hot[index] = 1.0
            try:  # a gradient may be a view of the one-hot (a sum's backward expands it): used before the reset
                grads = torch.autograd.grad(out, wrt, grad_outputs=one_hot, retain_graph=True, allow_unused=True)
                parts = []
                finite = True
                for k, (g, value) in enumerate(zip(grads[:len(leaves)], flat_values)):
                    if g is None:
                        continue
                    used = True
                    flat_g = g.detach().reshape(-1)
                    if sparse[k] is None:
                        sparse[k] = _few(int(torch.count_nonzero(flat_g)), flat_g)
                    if sparse[k]:
                        moved, sparse[k] = _moved_entries(flat_g)
                        product = flat_g[moved] * value[moved]
                    else:
                        # dense: masking g != 0 first cost a third of the bound terms of fla's linear cross-entropy
                        # gradient, whose dW elements depend on 4.2 M terms each
                        if buffers[k] is None:
                            buffers[k] = torch.empty_like(value)
                        product = torch.mul(flat_g, value, out=buffers[k])
                    # `value` is finite (non-finite inputs zeroed), so g * value is non-finite exactly where a moving
                    # g is (NaN or Inf), and 0 where g is
                    if not finite_everywhere(product):
                        finite = False
                        product.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
                    parts.append(product)
                terms = RowTerms.of(parts, roundoff)
                carried = 0.0
                for k, (value, g) in enumerate(zip(carriers, grads[len(leaves):])):
                    if g is None:
                        continue
                    if sparse_carrier[k] is None:
                        sparse_carrier[k] = value.shape == g.shape and _few(int(torch.count_nonzero(g)), g)
                    if sparse_carrier[k]:  # the same sum over the entries where g is not zero
                        flat_g = g.detach().reshape(-1)
                        moved, sparse_carrier[k] = _moved_entries(flat_g)
                        value, g = value.reshape(-1)[moved], flat_g[moved]
                    carried += float((value * g).abs().nan_to_num(nan=0.0, posinf=0.0).sum())
            finally:
                flat_one_hot[index] = 0.0
            found.append((terms, finite, carried))
    except RuntimeError:
        return None
    return found if used else None


def _sampled_terms_on_device(out: Any, leaves: Sequence[Any], values: Sequence[Any], samples: Sequence[int],
                             roundoff: float, intermediates: Sequence[Any] = (),
                             magnitudes: Sequence[Any] | None = None) -> list[tuple[RowTerms, bool, float]] | None:
    """_sampled_terms on a GPU, with one read-back for all samples instead of a dozen per sample.

    Without MPS the GPU runs one process's kernels at a time, so every read-back waits for the other processes'
    time slices: with four processes keeping the H200 busy, each of RowTerms' reads took 6.6 ms instead of 0.04
    (benchmarks/gpu_sharing.py), and fla_kl_div.grad's terms took 325 s inside the library against 61 s alone. Here
    every figure stays a 0-d tensor on the GPU until all samples are done, every product is formed densely (on the
    GPU a pass over 4.2 M zeros costs less than the read-back a gather needs), non-finite products are zeroed
    unconditionally, and the smallest quantum is taken over every term (RowTerms.from_figures). The figures are
    those of the CPU path up to the summation order."""
    import torch

    wrt = list(leaves) + list(intermediates)
    flat_values = [v.reshape(-1) for v in values]
    buffers: list[Any] = [None] * len(flat_values)
    carriers = [value.detach() for value in (magnitudes if magnitudes is not None else intermediates)]
    figures: list[Any] = []  # every sample's 0-d tensors, in order; `layout` says how many of each kind it has
    layout: list[tuple[int, int]] = []  # per sample: (products, carriers)
    one_hot = torch.zeros(out.shape, dtype=out.dtype, device=out.device)
    flat_one_hot = one_hot.view(-1)
    used = False
    try:
        for index in samples:
            flat_one_hot[index] = 1.0
            try:
                grads = torch.autograd.grad(out, wrt, grad_outputs=one_hot, retain_graph=True, allow_unused=True)
                n_products = n_carriers = 0
                for k, (g, value) in enumerate(zip(grads[:len(leaves)], flat_values)):
                    if g is None:
                        continue
                    used = True
                    if buffers[k] is None:
                        buffers[k] = torch.empty_like(value)
                    product = torch.mul(g.detach().reshape(-1), value, out=buffers[k])
                    figures.append(torch.isfinite(product).all().to(torch.float64))
                    product.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
                    figures.extend(RowTerms.figures(product))
                    n_products += 1
                for value, g in zip(carriers, grads[len(leaves):]):
                    if g is None:
                        continue
                    figures.append((value * g).abs().nan_to_num(nan=0.0, posinf=0.0).sum().to(torch.float64))
                    n_carriers += 1
            finally:
                flat_one_hot[index] = 0.0
            layout.append((n_products, n_carriers))
    except RuntimeError:
        return None
    if not used:
        return None
    read = torch.stack(figures).tolist() if figures else []
    found: list[tuple[RowTerms, bool, float]] = []
    at = 0
    for n_products, n_carriers in layout:
        per_part = [read[at + 6 * j: at + 6 * (j + 1)] for j in range(n_products)]
        at += 6 * n_products
        carried = 0.0
        for value in read[at: at + n_carriers]:
            carried += value
        at += n_carriers
        finite = all(part[0] == 1.0 for part in per_part)
        found.append((RowTerms.from_figures([part[1:] for part in per_part], roundoff), finite, carried))
    return found


def _few(count: int, vector: Any) -> bool:
    """Whether `count` non-zero entries are few enough in `vector` to gather them first (SPARSE_FRACTION)."""
    return SPARSE_FRACTION * count < vector.numel()


def _moved_entries(flat_g: Any) -> tuple[Any, bool]:
    """The indices of a flat gradient's non-zero entries, and whether they were few: a first sample that said sparse
    wrongly (a masked element's zero row) then costs that one sample, and the next ones are formed densely."""
    moved = flat_g.nonzero().reshape(-1)
    return moved, _few(int(moved.numel()), flat_g)


# --- The log-space statistic: what a float32 max/logsumexp of the inputs' magnitude costs -------------------------
#
# Fused softmax, cross-entropy and logsumexp kernels (Liger-Kernel, unsloth, flash-attention's backward) compute
# p_j = exp(x_j - L) from a row statistic L = logsumexp(x) kept in float32. L has the inputs' magnitude, so its
# rounding alone is up to u |L| (half an ulp of 1e4 is 4.9e-4 in float32), and every exp(x_j - L) of the row carries
# it as a relative error: p~ = p exp(-theta), |theta| <= u |L|. No perturbation of the inputs reproduces this: the
# reference renormalises (softmax's outputs sum to one, p~'s do not), and where a row is saturated (p_max = 1/(1+eps))
# the reference is insensitive to any input change of that size (dp_max/dx ~ eps), while the kernel's p_max loses the
# whole eps when log(1+eps) < half an ulp of L. PyTorch eager ((x - m) - log s, with x - m exact) does not have it.
#
# The term applies to outputs of ops computed relative to such a statistic, recognised on the float64 reference:
# invariant under a common shift of every float input (the hallmark of subtracting a row max / logsumexp / mean)
# and not invariant under scaling them (a normalisation such as layer norm is scale-invariant: its statistic's
# error is relative to the row's spread, which the input-perturbation term already covers). Per element the bound
# is expm1(theta) min(|y|, 1), theta = LOGSPACE_UNITS u S, S the largest finite |input|: an exponential of a
# log-space difference (|y| <= 1 before the upstream scale) carries exp(theta) - 1 relative, a log-space value
# (log-softmax, a loss) carries theta absolute. Where theta reaches 1 (|x| ~ 1/(2u) = 8e6 in float32) a float32
# statistic carries no digit of such outputs, and the bound says so.
LOGSPACE_UNITS = 2.0  # the statistic's rounding (<= u |L|) and that of the subtraction x - L (<= u |x - L|)
# RMS change / RMS of the output under which the reference counts as invariant: below float32's floor (8 eps =
# 9.5e-7 of the RMS), so a change the test calls invariance could not fail a case anyway (a saturated softmax,
# p in {0, 1}, is scale-invariant, and a float32 lse costs it nothing: fl(m + log 1) = m)
INVARIANCE_RTOL = 1e-7


@dataclass(frozen=True)
class LogspaceBound:
    """Per output: the log-space statistic's bound, RMS and p99.9 over the elements, and the magnitude S it used."""

    rmse: float = 0.0
    quantile: float = 0.0
    magnitude: float = 0.0
    relative: float = 0.0  # expm1(theta): what one element may carry, relative (or absolute, for a log-space value)

    @property
    def present(self) -> bool:
        return self.quantile > 0.0


def _power_of_two_near(value: float) -> float:
    """2^round(log2 value): a shift of the inputs' size that float64 adds exactly to float32-sized values."""
    return 2.0 ** round(math.log2(value)) if value > 0 and math.isfinite(value) else 1.0


def _relative_change(moved: Any, truth: Any) -> float:
    """RMS |moved - truth| / RMS |truth| over the elements finite in both (inf: not comparable, i.e. moved)."""
    import torch

    if not isinstance(moved, torch.Tensor) or moved.shape != truth.shape:
        return math.inf
    t, m = truth.to(torch.float64), moved.detach().to(torch.float64)
    everywhere = finite_everywhere(t, m)  # the common case: read in place, no masks and gathers
    both = None if everywhere else torch.isfinite(t) & torch.isfinite(m)
    if t.numel() == 0 or (both is not None and not bool(both.any())):
        return math.inf
    t, m = selected(t, both, everywhere), selected(m, both, everywhere)
    scale = float(t.pow(2).mean().sqrt())
    change = float((m - t).pow(2).mean().sqrt())
    if scale == 0.0:
        return 0.0 if change == 0.0 else math.inf
    return change / scale


def _outputs_or_none(reference: Any, args: Sequence[Any]) -> list[Any] | None:
    """The reference's outputs on `args` as a list; None when it raises (the bound then adds no budget)."""
    import torch

    try:
        with torch.no_grad():
            result = reference(*args)
    except Exception:  # the reference ran on these inputs' values once already
        return None
    outputs = list(result) if isinstance(result, (tuple, list)) else [result]
    return [o.detach().cpu() if isinstance(o, torch.Tensor) else o for o in outputs]  # beside the CPU truth


def _finite_peak(values: Any) -> float:
    """The largest finite |value| (0.0 where none is finite); without copying the finite elements out when all are,
    the usual case."""
    import torch

    finite_mask = torch.isfinite(values)
    if bool(finite_mask.all()):
        return float(values.abs().max())
    finite = values[finite_mask]
    return float(finite.abs().max()) if finite.numel() else 0.0


def logspace_bounds(reference: Any, truth_inputs: Sequence[Any], truths: Sequence[Any], dtype: str
                    ) -> list[LogspaceBound]:
    """The log-space statistic's bound for every output of one case (see above); zero where it does not apply."""
    import numpy as np
    import torch

    from opgate.verify.compare import QUANTILE

    empty = [LogspaceBound()] * len(truths)
    positions = [i for i, v in enumerate(truth_inputs)
                 if isinstance(v, torch.Tensor) and v.dtype == torch.float64 and v.numel() > 0]
    if not positions:
        return empty
    peaks = [_finite_peak(truth_inputs[i]) for i in positions]
    magnitude = max(peaks)
    if magnitude == 0.0:
        return empty
    shifted, scaled = list(truth_inputs), list(truth_inputs)
    for i, peak in zip(positions, peaks):
        shifted[i] = truth_inputs[i] + _power_of_two_near(peak)
        scaled[i] = truth_inputs[i] * 2.0
    after_shift = _outputs_or_none(reference, shifted)
    if after_shift is None:
        return empty
    candidates = [truth.dtype.is_floating_point and truth.numel() > 0 and k < len(after_shift)
                  and _relative_change(after_shift[k], truth) <= INVARIANCE_RTOL for k, truth in enumerate(truths)]
    if not any(candidates):  # not computed relative to a row statistic: spare the second evaluation
        return empty
    after_scale = _outputs_or_none(reference, scaled)
    if after_scale is None:
        return empty
    roundoff = ACCUMULATION_ROUNDOFF.get(dtype, DEFAULT_ACCUMULATION_ROUNDOFF)
    # theta <= u |L| + u |x - L|; and never more than log n: the rounded statistic lies between the row's max m
    # (exact) and L = m + log s, s <= n the number of terms (round to nearest of m + log s is at least as close as m)
    terms = max(int(truth_inputs[i].numel()) for i in positions)
    theta = min(LOGSPACE_UNITS * roundoff * magnitude, math.log(max(terms, 2)))
    relative = math.expm1(theta)  # p~ = p exp(theta): theta relative while small
    bounds = []
    for k, (truth, candidate) in enumerate(zip(truths, candidates)):
        zero = bool(candidate) and not bool(truth[torch.isfinite(truth)].ne(0).any())  # 0 is scale-invariant too
        if not candidate or k >= len(after_scale) or (
                not zero and _relative_change(after_scale[k], truth) <= INVARIANCE_RTOL):
            bounds.append(LogspaceBound())  # not shift-invariant, or scale-invariant too (a normalisation)
            continue
        t = truth.to(torch.float64)
        finite = t[torch.isfinite(t)].abs()
        if finite.numel() == 0:
            bounds.append(LogspaceBound())
            continue
        # min(|y|, 1) per element; an output that is 0 everywhere (a log-softmax of one column, where a fast-math
        # log2 returns 1e-8 for log 1) carries theta absolute, as a log-space value does
        weight = finite.clamp_max(1.0) if float(finite.max()) > 0.0 else torch.ones_like(finite)
        bounds.append(LogspaceBound(relative * float(weight.pow(2).mean().sqrt()),
                                    relative * float(np.quantile(weight.numpy(), QUANTILE)), magnitude, relative))
    if len(bounds) < len(truths):
        bounds += [LogspaceBound()] * (len(truths) - len(bounds))
    return bounds
