"""The comparator: error statistics against the float64 truth, non-finite values classified apart."""

from __future__ import annotations

import math

import torch

from opgate.verify.compare import OutputStats, compare_output, count_exceeding, ulp_distance


def test_ulp_distance_counts_representable_steps_across_zero():
    one = torch.tensor([1.0], dtype=torch.float16)
    next_up = torch.nextafter(one, torch.tensor([2.0], dtype=torch.float16))
    assert ulp_distance(next_up, one).item() == 1
    neg = torch.tensor([-0.0], dtype=torch.float32)
    pos = torch.tensor([0.0], dtype=torch.float32)
    assert ulp_distance(neg, pos).item() == 0
    tiny_pos = torch.nextafter(pos, torch.tensor([1.0]))
    tiny_neg = torch.nextafter(pos, torch.tensor([-1.0]))
    assert ulp_distance(tiny_pos, tiny_neg).item() == 2


def _ulps_by_the_wide_formula(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Every float's bits widened to int64 first: the definition the narrow-integer path must match."""
    def ordered(values: torch.Tensor) -> torch.Tensor:
        ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[values.element_size()]
        bits = values.contiguous().view(ints).to(torch.int64)
        magnitude = bits & ((1 << (8 * values.element_size() - 1)) - 1)
        return torch.where(bits < 0, -magnitude, magnitude)
    return (ordered(a) - ordered(b)).abs()


def test_ulp_distance_in_the_floats_own_width_is_the_int64_definition_everywhere():
    """Zeros of both signs, infinities, NaN, subnormals, the extremes and opposite signs far apart (whose distance
    needs more than the float's width), in every float dtype a kernel returns."""
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        info = torch.finfo(dtype)
        special = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, info.tiny, -info.tiny, info.max, -info.max,
                                info.smallest_normal / 4, 1.0, -1.0], dtype=torch.float64).to(dtype)
        a = torch.cat([special, (torch.randn(5000, generator=gen, dtype=torch.float64) * 100).to(dtype)])
        b = torch.cat([special.flip(0), (a[len(special):].double() * (1 + torch.randn(5000, generator=gen,
                       dtype=torch.float64) * 1e-2)).to(dtype)])
        assert torch.equal(ulp_distance(a, b), _ulps_by_the_wide_formula(a, b)), dtype
        assert ulp_distance(a, b).dtype == torch.int64


def test_statistics_of_a_known_error():
    truth = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    cand = torch.tensor([[1.0, 2.0], [3.0, 4.5]], dtype=torch.float32)
    stats = compare_output(cand, truth, "float32")
    assert stats.max_abs == 0.5
    assert math.isclose(stats.rmse, math.sqrt(0.25 / 4))
    assert stats.worst is not None and stats.worst.index == (1, 1)
    assert stats.worst.candidate == 4.5 and stats.worst.truth == 4.0
    assert math.isclose(stats.max_rel, 0.125)
    assert stats.ulp_max == 0.5 / 2**-21  # ulp of 4.0 in float32 is 2^-21
    assert 0.99 < stats.cosine < 1.0
    assert math.isclose(stats.sqnr_db, 10 * math.log10(30 / 0.25))


def test_nan_where_truth_is_finite_is_counted_and_shown():
    truth = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    cand = torch.tensor([1.0, float("nan"), 3.0], dtype=torch.float16)
    stats = compare_output(cand, truth, "float16")
    assert stats.nonfinite_unexpected == 1
    assert stats.worst.index == (1,) and math.isnan(stats.worst.candidate)


def test_nonfinite_truth_must_be_matched_by_class():
    truth = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0], dtype=torch.float64)
    good = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0])
    bad = torch.tensor([0.0, float("nan"), float("inf"), 1.0])
    assert compare_output(good, truth, "float32").nonfinite_missed == 0
    assert compare_output(bad, truth, "float32").nonfinite_missed == 3


def test_nan_where_the_truth_is_an_infinity_is_excused_in_a_case_with_non_finite_inputs():
    # an infinite input multiplied by factors of both signs before the products are summed is +-Inf or NaN by the
    # order of operations (held-out corpus: mamba-ssm's chunked scan, -Inf in the reference's (C B^T) x, NaN in the
    # kernel's sum_n C_n (B_n x)); a finite value or the wrong infinity is still missed
    c, b = torch.tensor([1.0, 1.0], dtype=torch.float64), torch.tensor([2.0, -1.0], dtype=torch.float64)
    x = torch.tensor(math.inf, dtype=torch.float64)
    truth, recurrence = ((c * b).sum() * x).reshape(1), (c * (b * x)).sum().reshape(1)
    assert math.isinf(truth.item()) and math.isnan(recurrence.item())
    assert compare_output(recurrence.float(), truth, "float32").nonfinite_missed == 1
    either = compare_output(recurrence.float(), truth, "float32", nan_for_infinity=True)
    assert (either.nonfinite_missed, either.nonfinite_excused) == (0, 1)
    truths = torch.tensor([-math.inf, math.inf, math.nan], dtype=torch.float64)
    wrong = torch.tensor([-1.0, -math.inf, 2.0])
    assert compare_output(wrong, truths, "float32", nan_for_infinity=True).nonfinite_missed == 3


def test_overflow_of_the_dtype_accepts_inf_nan_and_saturation_but_not_small_or_wrong_sign_values():
    truth = torch.tensor([1e6, -1e6, 1e6, 1e6, 1e6, 1e6], dtype=torch.float64)  # beyond float16's 65504
    # -inf where the truth is +1e6: an overflowed partial sum that later terms cannot cancel (order-dependent).
    cand = torch.tensor([float("inf"), -65504.0, float("nan"), 1.0, -float("inf"), -65504.0], dtype=torch.float16)
    stats = compare_output(cand, truth, "float16")
    assert stats.nonfinite_missed == 2  # 1.0 should have overflowed; -65504 is finite with the wrong sign
    assert stats.nonfinite_unexpected == 0


def test_excused_nonfinite_where_the_baseline_overflows_too():
    truth = torch.tensor([1.0, 2.0], dtype=torch.float64)
    cand = torch.tensor([float("nan"), 2.0])
    mask = torch.tensor([True, False])
    stats = compare_output(cand, truth, "float32", baseline_lost=mask)
    assert stats.nonfinite_unexpected == 0 and stats.nonfinite_excused == 1


def test_shape_and_dtype_mismatch_are_problems_not_numbers():
    truth = torch.zeros(2, 3, dtype=torch.float64)
    assert "shape" in compare_output(torch.zeros(3, 2), truth, "float32").problem
    assert "dtype float16 != the reference's float32" in compare_output(torch.zeros(2, 3).half(), truth,
                                                                        "float32").problem
    assert "dtype int32 != the reference's float16" in compare_output(torch.zeros(2, 3, dtype=torch.int32), truth,
                                                                      "float16").problem
    # a wider float output is judged by its values (rounded to the reference's dtype) and flagged
    assert compare_output(torch.zeros(2, 3), truth, "float16").wider_dtype == "float32"
    assert "not a tensor" in compare_output(None, truth, "float32").problem


def test_quantized_outputs_compare_exactly_and_after_dequantization():
    truth = torch.tensor([10, -3, 127, 0], dtype=torch.int8)
    cand = torch.tensor([11, -3, 125, 0], dtype=torch.int8)
    stats = compare_output(cand, truth, "int8", quantized={"scale": 0.5, "zero_point": 0})
    assert stats.exact_mismatches == 2 and stats.off_by_more_than_one == 1
    assert stats.max_abs == 1.0  # two quanta of 0.5
    assert math.isfinite(stats.sqnr_db)
    assert count_exceeding(cand, truth, 0.6, {"scale": 0.5, "zero_point": 0}) == 1


def test_stats_round_trip_through_json_dicts():
    truth = torch.tensor([1.0, 2.0], dtype=torch.float64)
    stats = compare_output(torch.tensor([1.0, 2.5]), truth, "float32")
    assert OutputStats.from_dict(stats.to_dict()) == stats
    exact = compare_output(torch.tensor([1.0, 2.0]), truth, "float32")
    assert exact.sqnr_db == math.inf and OutputStats.from_dict(exact.to_dict()).sqnr_db == math.inf


def test_statistics_read_in_place_equal_those_of_the_gathered_elements() -> None:
    """Where every element is comparable compare_output reads the tensors in place (compare.selected), elsewhere it
    gathers them: the statistics of a non-contiguous output are the same whichever way it went."""
    import dataclasses

    from opgate.verify import compare

    truth = torch.randn(64, 48, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).t()
    candidate = truth.float()
    in_place = compare_output(candidate, truth, "float32")
    original = compare.selected
    try:
        # gathered through a mask (an all-finite output has none: compare.finite_everywhere's fast path)
        compare.selected = lambda values, mask, everywhere: values[
            mask if mask is not None else torch.ones(values.shape, dtype=torch.bool)]
        gathered = compare_output(candidate, truth, "float32")
    finally:
        compare.selected = original
    assert dataclasses.astuple(in_place) == dataclasses.astuple(gathered)
    assert in_place.compared == truth.numel()


def test_the_all_finite_fast_path_gives_the_statistics_of_the_classifying_one() -> None:
    """compare_output skips its non-finite classification when every element is finite (a float64 sum says so in one
    pass); the statistics are the same as the classifying path's, and any NaN, Inf or overflow still takes it."""
    import dataclasses

    from opgate.verify import compare

    gen = torch.Generator().manual_seed(5)
    truth = torch.randn(96, 40, dtype=torch.float64, generator=gen) * 10
    cases = [(truth.float() + 1e-5, truth, "float32"), (truth.half(), truth, "float16"),
             (truth.to(torch.bfloat16), truth.t().contiguous().t(), "bfloat16")]
    with_nan = truth.float().clone()
    with_nan[3, 4] = math.nan
    overflowing = truth.clone()
    overflowing[0, 0] = 1e6  # beyond float16: the rounded truth is Inf
    cases += [(with_nan, truth, "float32"), (overflowing.half(), overflowing, "float16")]
    original = compare.finite_everywhere
    for candidate, reference, dtype in cases:
        fast = compare_output(candidate, reference, dtype)
        try:
            compare.finite_everywhere = lambda *tensors: False
            slow = compare_output(candidate, reference, dtype)
        finally:
            compare.finite_everywhere = original
        assert repr(dataclasses.astuple(fast)) == repr(dataclasses.astuple(slow)), dtype  # NaN != NaN
    assert compare.finite_everywhere(torch.tensor([1e308, 1e308], dtype=torch.float64))  # the sum overflows
    assert not compare.finite_everywhere(torch.tensor([1.0, math.inf]), torch.tensor([2.0]))


def test_the_quantile_by_topk_is_numpys_bit_for_bit() -> None:
    """On a GPU compare_output takes p99.9 from the two order statistics torch.topk finds (compare.quantile_by_topk)
    rather than from numpy on a host copy: held to numpy.quantile exactly, at sizes around the interpolation's edges,
    with ties and zeros, and at quantiles whose smaller tail is either side."""
    import numpy as np

    from opgate.verify.compare import QUANTILE, quantile_by_topk

    gen = torch.Generator().manual_seed(11)
    for n in (1, 2, 3, 7, 999, 1000, 1001, 1002, 4096, 100_003):
        for values in (torch.randn(n, dtype=torch.float64, generator=gen).abs(),
                       torch.randint(0, 4, (n,), generator=gen).to(torch.float64),  # ties everywhere
                       torch.zeros(n, dtype=torch.float64)):
            for q in (QUANTILE, 0.5, 0.01, 0.0, 1.0):
                assert quantile_by_topk(values, q) == float(np.quantile(values.numpy(), q)), (n, q)


def test_an_output_left_on_the_gpu_is_compared_there_with_the_statistics_of_the_host() -> None:
    """A GPU implementation's outputs stay on the GPU (backends/base.function_runner) and judge_case compares them
    there, the truth joining them: the figures equal the host's (sums in another order may differ in the last bits;
    the quantiles, counts and worst element are exact)."""
    import dataclasses

    import pytest

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: there is no device output to compare in place")
    gen = torch.Generator().manual_seed(3)
    truth = torch.randn(512, 257, dtype=torch.float64, generator=gen) * 4
    overflowing = truth.clone()
    overflowing[1, 2] = 1e6
    with_nan = truth.half().clone()
    with_nan[5, 6] = math.nan
    for candidate, reference, dtype in [(truth.half(), truth, "float16"), (with_nan, truth, "float16"),
                                        (overflowing.half(), overflowing, "float16"),
                                        (truth.float().t(), truth.t(), "float32")]:
        lost = torch.zeros(reference.shape, dtype=torch.bool)
        host = compare_output(candidate, reference, dtype, baseline_lost=lost)
        device = compare_output(candidate.cuda(), reference, dtype, baseline_lost=lost)
        for field in dataclasses.fields(host):
            a, b = getattr(host, field.name), getattr(device, field.name)
            if isinstance(a, float) and math.isfinite(a) and field.name in ("rmse", "truth_rms", "truth_rms_all",
                                                                             "cosine", "sqnr_db"):
                assert b == pytest.approx(a, rel=1e-12), field.name
            else:
                assert repr(a) == repr(b), field.name
        assert count_exceeding(candidate.cuda(), reference.cuda(), 1e-3) == count_exceeding(candidate, reference, 1e-3)


def test_the_statistics_read_back_at_once_with_the_gpus_quantiles_are_the_hosts(monkeypatch) -> None:
    """compare_output reads every figure back in one copy (compare.ReadBack) and, on a GPU, takes its quantiles from
    torch.topk's order statistics; forced onto that path here, on the CPU, every statistic is the host path's, repr
    for repr, with NaN, overflow, integer and strided outputs."""
    import dataclasses
    import functools

    from opgate.verify import compare

    gen = torch.Generator().manual_seed(8)
    truth = torch.randn(40, 129, dtype=torch.float64, generator=gen) * 3
    with_nan = truth.half().clone()
    with_nan[2, 3] = math.nan
    big = truth.clone()
    big[0, 0] = 1e6
    ints = (truth * 10).round().to(torch.int32)
    cases = [(truth.float(), truth, "float32"), (truth.half(), truth, "float16"), (with_nan, truth, "float16"),
             (big.half(), big, "float16"), (ints + 1, ints, "int32"), (truth.t().float(), truth.t(), "float32")]
    host = [compare_output(c, t, d) for c, t, d in cases]
    monkeypatch.setattr(compare, "quantile_reads", functools.partial(compare.quantile_reads, by_topk=True))
    device_path = [compare_output(c, t, d) for c, t, d in cases]
    for a, b in zip(host, device_path):
        assert repr(dataclasses.astuple(a)) == repr(dataclasses.astuple(b))
