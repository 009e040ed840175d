"""Error statistics of one output against the float64 truth. Facts only; `calibrate` judges them.

For every (implementation, dtype, shape, seed) opgate records: max abs and max rel error (safe
denominator), RMSE, the 99.9th percentile of the elementwise error, ULP distance (floats), cosine
similarity, SQNR in dB, the count and share of mismatches, and the worst element's index and values.
Non-finite values are classified apart: NaN/Inf where the truth is finite is always a failure.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

from opgate.core import dtypes as dt

QUANTILE = 0.999  # the "high quantile" of the elementwise error that is judged (p99.9)


@dataclass(frozen=True)
class WorstElement:
    index: tuple[int, ...]
    candidate: float
    truth: float
    abs_error: float

    def describe(self) -> str:
        return f"at {list(self.index)}: got {self.candidate:.6g}, truth {self.truth:.6g}"


@dataclass(frozen=True)
class OutputStats:
    """Error statistics of one output tensor of one case."""

    name: str
    numel: int
    problem: str = ""  # shape/dtype mismatch, in words; empty when comparable
    compared: int = 0  # elements where truth (in the dtype) and candidate are both finite
    truth_rms: float = 0.0
    truth_quantile_abs: float = 0.0  # p99.9 of |truth|: the magnitude where the largest errors live
    # the same over every element whose truth is finite in the dtype (where `compared` leaves out elements the
    # candidate got non-finite): what a budget scales with, since a candidate is judged on all of them
    truth_rms_all: float = 0.0
    truth_quantile_all: float = 0.0
    max_abs: float = 0.0
    max_rel: float = 0.0
    rmse: float = 0.0
    quantile_abs: float = 0.0  # p99.9 of |candidate - truth|
    ulp_max: float = 0.0
    ulp_median: float = 0.0
    cosine: float = 1.0
    sqnr_db: float = math.inf
    nonfinite_unexpected: int = 0  # NaN/Inf where the truth is finite
    nonfinite_excused: int = 0  # ... where the dtype's eager baseline fails too (calibrate.baseline_lost_mask)
    nonfinite_missed: int = 0  # truth is NaN/Inf (or overflows the dtype) and the candidate disagrees
    unwritten: int = 0  # elements of a poisoned output buffer the implementation never wrote
    undefined: int = 0  # elements whose truth is undefined (NaN converted to an integer): not judged
    nan_dropped: int = 0  # truth NaN, candidate finite, allowed by the spec's nan_policy="ignore"
    exact_mismatches: int = 0  # integer outputs: elements that differ at all
    off_by_more_than_one: int = 0  # integer outputs: elements more than one quantum away
    mismatches: int = 0  # elements whose error exceeds the elementwise budget (set by the judge)
    worst: WorstElement | None = None
    wider_dtype: str = ""  # the candidate returned this wider float dtype (judged after rounding to the reference's)

    @property
    def mismatch_share(self) -> float:
        return self.mismatches / self.numel if self.numel else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["mismatch_share"] = self.mismatch_share
        if self.worst is not None:
            data["worst"] = {**asdict(self.worst), "index": list(self.worst.index)}
        return {k: _json_number(v) for k, v in data.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "OutputStats":
        fields = {k: _from_json_number(v) for k, v in data.items() if k in cls.__dataclass_fields__}
        worst = data.get("worst")
        fields["worst"] = (WorstElement(tuple(worst["index"]), *(float(_from_json_number(worst[k])) for k in
                                                                 ("candidate", "truth", "abs_error")))
                           if worst else None)
        return cls(**fields)


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


def _from_json_number(value: Any) -> Any:
    if value in ("nan", "inf", "-inf"):
        return float(value)
    return value


def _ordered_bits(values: Any) -> Any:
    """Map float bit patterns to integers whose difference is the ULP distance (+0 and -0 coincide), in the
    integer type of the float's width: -magnitude never overflows it, and a 4-byte pass is half an 8-byte one (these
    passes were a third of a 4.2 M-element gradient's calibration comparisons on the CPU)."""
    import torch

    int_type = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[values.element_size()]
    bits = values.contiguous().view(int_type)
    magnitude = bits & ((1 << (8 * values.element_size() - 1)) - 1)
    return torch.where(bits < 0, -magnitude, magnitude)


def ulp_distance(candidate: Any, truth_in_dtype: Any) -> Any:
    """Elementwise ULP distance between two tensors of the same float dtype, as int64 (the difference of two
    ordered values can need one bit more than the float's width)."""
    import torch

    return (_ordered_bits(candidate).to(torch.int64) - _ordered_bits(truth_in_dtype).to(torch.int64)).abs()


def selected(values: Any, mask: Any, everywhere: bool) -> Any:
    """values[mask], flat; `everywhere` (the mask is all True, as it is on most outputs): the values flattened
    without the boolean gather, the same elements in the same order (a 4.2 M-element gradient's statistics gathered
    every tensor they read once more)."""
    return values.reshape(-1) if everywhere else values[mask]


def dequantize(values: Any, quantized: Mapping[str, Any]) -> Any:
    import torch

    scale = float(quantized.get("scale", 1.0))
    zero_point = float(quantized.get("zero_point", 0))
    return (values.to(torch.float64) - zero_point) * scale


def high_quantile(values: Any, q: float = QUANTILE) -> float:
    """numpy.quantile(values, q) (its default "linear" method), of a flat tensor of finite values wherever it lives.
    A CPU tensor goes to numpy as before; on a GPU the two order statistics the interpolation reads come from
    torch.topk of the smaller tail (0.1 % of the elements for p99.9) and are interpolated with numpy's own formula,
    so the figure is the same bit for bit without copying the tensor to the host."""
    reads, finish = quantile_reads(values, q)
    return finish([float(r) for r in reads])


def quantile_by_topk(values: Any, q: float = QUANTILE) -> float:
    """high_quantile's device path on any device (the tests hold it to numpy on the CPU)."""
    reads, finish = quantile_reads(values, q, by_topk=True)
    return finish([float(r) for r in reads])


def quantile_reads(values: Any, q: float = QUANTILE, by_topk: bool | None = None,
                   ) -> tuple[list[Any], Callable[[list[float]], float]]:
    """The 0-d tensors high_quantile reads (none on the CPU, where numpy answers at once) and how it finishes from
    their values: a comparison on a GPU reads them back with its other figures in one copy (ReadBack)."""
    import numpy as np

    flat = values.reshape(-1)
    if not (by_topk if by_topk is not None else flat.device.type != "cpu"):
        value = float(np.quantile(flat.numpy(), q))
        return [], lambda _: value
    n = int(flat.numel())
    if n == 0:
        raise ValueError("high_quantile of an empty tensor")
    virtual = (n - 1) * q  # numpy's virtual index for its "linear" method
    if virtual >= n - 1:
        return [flat.max()], lambda read: read[0]
    lower = 0 if virtual < 0 else math.floor(virtual)
    gamma = 0.0 if virtual < 0 else virtual - lower
    if n - lower <= lower + 2:  # the upper tail is the smaller one: descending, its last two are lower and lower+1
        top = flat.topk(n - lower, largest=True, sorted=True).values
        reads = [top[-1], top[-2]]
    else:
        bottom = flat.topk(lower + 2, largest=False, sorted=True).values
        reads = [bottom[lower], bottom[lower + 1]]

    def finish(read: list[float]) -> float:
        below, above = read
        diff = above - below  # numpy's _lerp, term for term
        return above - diff * (1 - gamma) if gamma >= 0.5 else below + diff * gamma

    return reads, finish


class ReadBack:
    """0-d tensors gathered to be read back to Python in one copy: on a shared GPU every read-back waits for the
    other processes' time slices (benchmarks/gpu_sharing.py), so a comparison reads its figures once, not one by one."""

    def __init__(self) -> None:
        self._tensors: list[Any] = []
        self.values: list[float] = []

    def add(self, tensor: Any) -> int:
        import torch

        self._tensors.append(tensor.reshape(()).to(torch.float64))
        return len(self._tensors) - 1

    def add_all(self, tensors: Sequence[Any]) -> list[int]:
        return [self.add(t) for t in tensors]

    def read(self) -> list[float]:
        import torch

        self.values = torch.stack(self._tensors).tolist() if self._tensors else []
        return self.values


# Below this many elements an output on a GPU is copied to the host and compared there: a comparison on the GPU still
# reads back four or five times (finiteness, the figures in one ReadBack, the elements over budget, the sampled ones),
# and each read-back waits for the other processes' time slices on a shared GPU (6.6 ms with four busy neighbours,
# benchmarks/gpu_sharing.py), more than the host's statistics of a small output cost.
MIN_DEVICE_COMPARE_ELEMENTS = 1 << 17


def where_compared(candidate: Any) -> Any:
    """The candidate output where judge_case compares it: in place on its GPU when it is large, else on the host."""
    if (hasattr(candidate, "device") and candidate.device.type != "cpu"
            and candidate.numel() < MIN_DEVICE_COMPARE_ELEMENTS):
        return candidate.detach().cpu()
    return candidate


def on_device_of(reference: Any, value: Any) -> Any:
    """`value` (a tensor, or None) on `reference`'s device: the comparison runs where the candidate's output is."""
    if value is None or not hasattr(value, "device") or not hasattr(reference, "device"):
        return value
    return value if value.device == reference.device else value.to(reference.device)


def compare_output(
    candidate: Any,
    truth: Any,
    out_dtype: str,
    name: str = "out",
    baseline_lost: Any | None = None,
    quantized: Mapping[str, Any] | None = None,
    unwritten: int = 0,
    undefined: Any | None = None,
    nan_policy: str = "propagate",
    nan_for_infinity: bool = False,
) -> OutputStats:
    """Statistics of `candidate` against the float64 `truth`, for an output whose dtype is `out_dtype`.

    baseline_lost: bool mask of elements the reference evaluated in `out_dtype` itself fails while the
    truth is finite (see calibrate.baseline_lost_mask); a candidate's NaN/Inf there is counted as
    excused, not unexpected.
    quantized: {"scale", "zero_point"} for integer outputs that are quantized values: they are compared
    exactly and, for the float statistics, after dequantization.
    nan_for_infinity: a NaN where the truth is +Inf or -Inf is excused, not missed (a case with non-finite inputs).
    Where an infinite input is multiplied by factors of both signs before the products are summed, the truth's class
    is the reference's order of operations, not the op's: mamba-ssm's chunked scan is (C B^T) x = s Inf = -Inf in
    the spec's order and sum_n C_n (B_n x) = +Inf - Inf = NaN in the kernel's state recurrence. A NaN still signals
    what the input did; a finite value, or an infinity of the wrong sign, still fails.
    """
    import torch

    numel = int(truth.numel())
    if not isinstance(candidate, torch.Tensor):
        return OutputStats(name, numel, problem=f"returned {type(candidate).__name__}, not a tensor")
    if tuple(candidate.shape) != tuple(truth.shape):
        return OutputStats(name, numel, problem=f"shape {list(candidate.shape)} != expected {list(truth.shape)}")
    got_dtype = dt.dtype_name(candidate.dtype)
    wider = ""
    if got_dtype != out_dtype:
        if not (dt.is_float(got_dtype) and dt.is_float(out_dtype) and dt.ITEMSIZE.get(got_dtype, 0) >
                dt.ITEMSIZE.get(out_dtype, 0)):
            return OutputStats(name, numel, problem=f"dtype {got_dtype} != the reference's {out_dtype}")
        # a wider float result (a float32 loss for float16 logits, as fla documents): the values are judged after
        # rounding to the reference's dtype, and the check says so as a documented deviation
        wider = got_dtype
        candidate = candidate.detach().to(getattr(torch, out_dtype))
    # compared where the candidate is: a GPU output stays there and the truth (and masks) join it, where a 4.2 M
    # element gradient's statistics take milliseconds, not a host core's seconds
    candidate = candidate.detach()
    truth = on_device_of(candidate, truth)
    baseline_lost = on_device_of(candidate, baseline_lost)
    undefined = on_device_of(candidate, undefined)
    n_undefined = 0
    if undefined is not None and bool(undefined.any()):
        # not judged: the candidate is made to agree with the truth there, and the elements are counted
        n_undefined = int(undefined.sum())
        candidate = torch.where(undefined, truth.to(candidate.dtype), candidate)

    exact_mismatches = off_by_more = 0
    if not dt.is_float(out_dtype):
        diff = (candidate.to(torch.int64) - truth.to(torch.int64)).abs()
        exact_mismatches = int((diff != 0).sum())
        off_by_more = int((diff > 1).sum())
        if quantized:
            cand64, truth64 = dequantize(candidate, quantized), dequantize(truth, quantized)
        else:
            cand64, truth64 = candidate.to(torch.float64), truth.to(torch.float64)
        truth_in_dtype = truth
    else:
        cand64, truth64 = candidate.to(torch.float64), truth.to(torch.float64)
        truth_in_dtype = truth64.to(candidate.dtype)

    finite = finite_everywhere(truth64, truth_in_dtype, cand64)
    if finite:  # the common case: every class below is empty and every element is compared
        missed = excused = unexpected = nan_dropped = 0
        compared, n_compared = None, numel
    else:
        truth_finite = torch.isfinite(truth64)
        td_finite = torch.isfinite(truth_in_dtype.to(torch.float64))
        cand_finite = torch.isfinite(cand64)

        # Non-finite classes: NaN must meet NaN, +Inf +Inf, -Inf -Inf.
        special = ~truth_finite
        same_class = (torch.isnan(cand64) & torch.isnan(truth64)) | (cand64 == truth64)
        nan_dropped = 0
        if nan_policy == "ignore":
            dropped = torch.isnan(truth64) & ~torch.isnan(cand64)
            nan_dropped = int(dropped.sum())
            same_class = same_class | dropped
        excused_order = 0
        if nan_for_infinity:
            either_order = torch.isinf(truth64) & torch.isnan(cand64)
            excused_order = int((either_order & ~same_class).sum())
            same_class = same_class | either_order
        missed = int((special & ~same_class).sum())
        # Truth finite but beyond the dtype's range: the rounded answer is +-Inf. Accepted: any infinity,
        # saturating near the top of the range with the right sign, and NaN. Once a partial sum overflows the
        # result depends on the summation order: an Inf later terms cannot cancel (of either sign), NaN where
        # +Inf meets -Inf, or the right Inf. A finite value of the wrong sign or far below the top fails.
        overflow = truth_finite & ~td_finite
        lost = (baseline_lost if baseline_lost is not None
                else torch.zeros(truth64.shape, dtype=torch.bool, device=truth64.device))
        excused = excused_order
        if bool(overflow.any()):
            limit = dt.max_finite(out_dtype) / 2
            ok = ~cand_finite | ((torch.sign(cand64) == torch.sign(truth64)) & (cand64.abs() >= limit))
            excused += int((overflow & ~ok & lost).sum())
            missed += int((overflow & ~ok & ~lost).sum())
        bad = td_finite & ~cand_finite
        excused += int((bad & lost).sum())
        bad = bad & ~lost
        unexpected = int(bad.sum())

        compared = td_finite & cand_finite
        n_compared = int(compared.sum())
    stats: dict[str, Any] = dict(
        name=name, numel=numel, compared=n_compared, nonfinite_unexpected=unexpected, nonfinite_excused=excused,
        nonfinite_missed=missed, unwritten=unwritten, undefined=n_undefined, nan_dropped=nan_dropped,
        wider_dtype=wider,
        exact_mismatches=exact_mismatches,
        off_by_more_than_one=off_by_more,
    )
    worst: WorstElement | None = None
    everywhere = n_compared == numel
    if n_compared:
        c = selected(cand64, compared, everywhere)
        t = selected(truth64, compared, everywhere)
        err = (c - t).abs()
        squares = t.pow(2)
        rms_tensor = squares.mean().sqrt()
        floor = torch.clamp_min(1e-3 * rms_tensor, dt.smallest_normal(out_dtype) if dt.is_float(out_dtype) else 1e-300)
        back = ReadBack()  # every figure below in one copy (the same values as reading each in turn)
        at = err.argmax()
        figures = dict(zip(("truth_rms", "sum_err2", "sum_sig2", "norm_c", "norm_t", "dot", "max_abs", "max_rel", "at"),
                           back.add_all([rms_tensor, err.pow(2).sum(), squares.sum(), c.norm(), t.norm(), (c * t).sum(),
                                         err.max(), (err / t.abs().clamp_min(floor)).max(), at])))
        truth_q_reads, truth_q = quantile_reads(t.abs())
        err_q_reads, err_q = quantile_reads(err)
        truth_q_at, err_q_at = back.add_all(truth_q_reads), back.add_all(err_q_reads)
        if dt.is_float(out_dtype):
            ulps = ulp_distance(selected(candidate, compared, everywhere),
                                selected(truth_in_dtype, compared, everywhere))
            # the order statistics of the integers, then the two figures as floats (exact below 2^53): the same
            # values as those of the whole tensor converted first, without converting it
            figures.update(ulp_max=back.add(ulps.max().to(torch.float64)),
                           ulp_median=back.add(ulps.median().to(torch.float64)))
        if everywhere:  # the worst element's values, read with the rest
            figures.update(worst_c=back.add(cand64.reshape(-1)[at]), worst_t=back.add(truth64.reshape(-1)[at]))
        read = back.read()
        value = {name: read[k] for name, k in figures.items()}
        truth_rms, sum_err2, sum_sig2 = value["truth_rms"], value["sum_err2"], value["sum_sig2"]
        norm_c, norm_t = value["norm_c"], value["norm_t"]
        if norm_c == 0.0 and norm_t == 0.0:
            cosine = 1.0
        elif norm_c == 0.0 or norm_t == 0.0:
            cosine = 0.0
        else:
            cosine = value["dot"] / (norm_c * norm_t)
        truth_quantile = truth_q([read[k] for k in truth_q_at])
        stats.update(
            truth_rms=truth_rms,
            truth_quantile_abs=truth_quantile,
            truth_rms_all=truth_rms,
            truth_quantile_all=truth_quantile,
            max_abs=value["max_abs"],
            max_rel=value["max_rel"],
            rmse=math.sqrt(sum_err2 / n_compared),
            quantile_abs=err_q([read[k] for k in err_q_at]),
            cosine=cosine,
            sqnr_db=(math.inf if sum_err2 == 0.0 else
                     (10.0 * math.log10(sum_sig2 / sum_err2) if sum_sig2 > 0 else -math.inf)),
        )
        if dt.is_float(out_dtype):
            stats.update(ulp_max=value["ulp_max"], ulp_median=value["ulp_median"])
        flat_pos = int(value["at"])
        if everywhere:
            worst = _worst_of(flat_pos, tuple(truth64.shape), value["worst_c"], value["worst_t"])
        else:
            flat_pos = int(torch.nonzero(compared.reshape(-1)).reshape(-1)[flat_pos])
            worst = _worst_at(flat_pos, cand64, truth64)
    judged = numel if finite else int(td_finite.sum())
    if judged > n_compared:  # the candidate is non-finite somewhere (eager overflowing, in the calibration)
        everywhere = truth64[td_finite]
        stats.update(truth_rms_all=float(everywhere.pow(2).mean().sqrt()),
                     truth_quantile_all=high_quantile(everywhere.abs()))
    # A non-finite surprise is the most telling element to show.
    surprise = None if finite else bad | (special & ~same_class)
    if surprise is not None and bool(surprise.any()):
        flat_pos = int(torch.nonzero(surprise.reshape(-1))[0])
        worst = _worst_at(flat_pos, cand64, truth64)
    return OutputStats(worst=worst, **stats)


def finite_everywhere(*tensors: Any) -> bool:
    """Whether every element of every tensor is finite: a float64 sum is finite when every term is (NaN and Inf carry
    into it), and only a sum that overflowed or met a non-finite term needs the elementwise test. torch.isfinite's
    mask then all() was a fifth of a large gradient twin's bound terms (the products of fla_linear_cross_entropy.grad:
    4.2 M terms per sampled element, benchmarks/finite_terms.py), and compare_output's classifying masks a third of
    its time on such a gradient (benchmarks/compare_output.py)."""
    import torch

    seen: list[Any] = []
    for tensor in tensors:
        if any(tensor is other for other in seen) or tensor.numel() == 0 or not tensor.dtype.is_floating_point:
            continue
        seen.append(tensor)
    if not seen:
        return True
    sums = [tensor.sum(dtype=torch.float64) for tensor in seen]
    one_device = len({tensor.device for tensor in seen}) == 1
    read = torch.stack(sums).tolist() if one_device else [float(s) for s in sums]  # one read-back on a GPU
    return all(math.isfinite(total) or bool(torch.isfinite(tensor).all()) for total, tensor in zip(read, seen))


def _worst_at(flat_pos: int, cand64: Any, truth64: Any) -> WorstElement:
    return _worst_of(flat_pos, tuple(truth64.shape), float(cand64.reshape(-1)[flat_pos]),
                     float(truth64.reshape(-1)[flat_pos]))


def _worst_of(flat_pos: int, shape: tuple[int, ...], c: float, t: float) -> WorstElement:
    import numpy as np

    index = tuple(int(i) for i in np.unravel_index(flat_pos, shape)) if shape else ()
    err = abs(c - t) if math.isfinite(c) and math.isfinite(t) else math.inf
    return WorstElement(index, c, t, err)


def count_exceeding(candidate: Any, truth: Any, tolerance: float, quantized: Mapping[str, Any] | None = None,
                    rtol: float = 0.0) -> int:
    """Elements whose |candidate - truth| exceeds tolerance (+ rtol*|truth|); non-finite pairs are not counted
    here (they are classified by compare_output)."""
    import torch

    if quantized and not candidate.dtype.is_floating_point:
        c, t = dequantize(candidate, quantized), dequantize(truth, quantized)
    else:
        c, t = candidate.to(torch.float64), truth.to(torch.float64)
    both = torch.isfinite(c) & torch.isfinite(t)
    err = (c - t).abs()
    return int((both & (err > tolerance + rtol * t.abs())).sum())
