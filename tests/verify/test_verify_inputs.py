"""Case planning and input generation: deterministic, op-aware, honest about layouts and regimes."""

from __future__ import annotations

import math

import pytest
import torch

import opgate
from opgate.verify.inputs import (
    BUDGETS, Case, applicable_layouts, applicable_regimes, case_counts, edge_sizes, make_inputs, plan_cases,
)
from opgate.core.spec import SpecError


def test_case_counts_per_budget_grow_and_match_the_documented_numbers(softmax_op):
    counts = case_counts(softmax_op)
    assert counts["quick"] < counts["standard"] < counts["thorough"]
    assert counts == case_counts(softmax_op)  # deterministic
    assert list(BUDGETS) == ["quick", "standard", "thorough"]


def test_plan_is_deterministic_and_seeded(softmax_op):
    assert plan_cases(softmax_op, "standard", 0) == plan_cases(softmax_op, "standard", 0)
    shifted = plan_cases(softmax_op, "standard", 100)
    assert [c.seed for c in shifted][:3] == [100, 101, 102]


def test_plan_covers_declared_sizes_edge_sizes_regimes_and_layouts(softmax_op):
    cases = plan_cases(softmax_op, "standard")
    declared = {(c.dims_dict["M"], c.dims_dict["N"]) for c in cases if c.origin == "declared"}
    assert declared == {(2, 128), (2, 1024), (8, 128), (8, 1024)}
    n_sizes = {c.dims_dict["N"] for c in cases}
    assert {1, 3, 1023, 1025, 17, 1000} <= n_sizes  # 1, primes, 2^k +- 1, not a multiple of 16
    assert {c.regime for c in cases} == {"typical", "large", "huge", "tiny", "constant_rows", "ties", "nonfinite",
                                         "mixed"}  # `peaked` is for kind="logits"
    assert {c.layout for c in cases} == {"contiguous", "transposed", "strided"}


def test_edge_sizes_respect_the_cap_and_skip_declared_sizes():
    sizes = edge_sizes([128, 1024], cap=2048)
    assert sizes[:4] == [1, 3, 1023, 1025]
    assert 128 not in sizes and 1024 not in sizes and max(sizes) <= 2048
    assert edge_sizes([4], cap=64)[:3] == [1, 3, 5]


def test_exact_dims_are_never_fuzzed():
    op = opgate.Operator("attn", reference=lambda q: q, inputs=[opgate.TensorSpec("q", ("S", "D"))],
                         dims={"S": [16], "D": [64, 128]}, exact_dims=["D"])
    assert {c.dims_dict["D"] for c in plan_cases(op, "thorough")} == {64, 128}


def test_contiguous_inputs_get_no_layout_cases_and_bounded_kinds_no_scaling():
    op = opgate.Operator("p", reference=lambda p: p,
                         inputs=[opgate.TensorSpec("p", ("N",), kind="probability", contiguous=True)],
                         dims={"N": [8]}, propagates_nonfinite=False)
    assert applicable_layouts(op) == []
    assert applicable_regimes(op) == ["constant_rows"]


def test_inputs_are_bit_identical_across_calls(softmax_op):
    case = Case.make({"M": 3, "N": 17}, seed=5, regime="typical")
    a = make_inputs(softmax_op, case, "bfloat16")
    b = make_inputs(softmax_op, case, "bfloat16")
    assert torch.equal(a.values[0], b.values[0])
    assert a.values[0].dtype == torch.bfloat16
    assert a.truth[0].dtype == torch.float64
    assert torch.equal(a.truth[0], a.values[0].to(torch.float64))  # truth sees exactly the rounded inputs


def test_layouts_keep_values_and_change_strides(softmax_op):
    transposed = make_inputs(softmax_op, Case.make({"M": 3, "N": 5}, 1, layout="transposed"), "float32")
    x = transposed.laid_out[0]
    assert not x.is_contiguous() and x.stride() == (1, 3)
    assert torch.equal(x, transposed.values[0])
    strided = make_inputs(softmax_op, Case.make({"M": 3, "N": 5}, 1, layout="strided"), "float32")
    y = strided.laid_out[0]
    assert y.stride() == (10, 2) and torch.equal(y, strided.values[0])
    # the gaps between strided elements are poison, so a kernel that ignores strides reads NaN
    assert torch.isnan(y.as_strided((3, 10), (10, 1))[:, 1::2]).all()


def test_a_layout_case_at_a_declared_size_holds_that_sizes_first_values(softmax_op):
    """Its comparison with the contiguous case is then about the strides alone, and calibration computes its truth and
    bound terms once; the seeds of the cases after it do not move."""
    cases = plan_cases(softmax_op, "standard")
    declared = {c.dims: c for c in reversed(cases) if c.origin == "declared"}  # each size's first seed
    layouts = [c for c in cases if c.origin == "layout" and c.dims in declared]
    assert layouts, "softmax's standard plan has layout cases at declared sizes"
    for case in layouts:
        first = declared[case.dims]
        assert case.values_key() == first.values_key() and case.layout != first.layout
        assert torch.equal(make_inputs(softmax_op, case, "float16").values[0],
                           make_inputs(softmax_op, first, "float16").values[0])
    others = [c for c in cases if not (c.origin == "layout" and c.dims in declared)]
    assert sorted(c.seed for c in others) == sorted(set(c.seed for c in others))  # every other case draws its own


def test_regimes_shape_the_values(softmax_op):
    dims = {"M": 4, "N": 256}

    def values(regime, dtype="float16"):
        return make_inputs(softmax_op, Case.make(dims, 3, regime), dtype).values[0].to(torch.float64)

    large = values("large")
    assert large.abs().max() > 88  # exp overflows in float32 without max-subtraction
    assert torch.isfinite(large).all()
    huge = values("huge", "float32")
    assert huge.abs().max() > 1e35 and torch.isfinite(huge).all()
    tiny = values("tiny")
    smallest_normal = torch.finfo(torch.float16).smallest_normal
    assert ((tiny != 0) & (tiny.abs() < smallest_normal)).any()  # subnormals present
    rows = values("constant_rows")
    assert (rows == rows[:, :1]).all()
    ties = values("ties")
    assert set(ties.unique().tolist()) <= {-1.0, -0.5, 0.0, 0.5, 1.0}
    nonfinite = values("nonfinite")
    assert torch.isnan(nonfinite).sum() == 1 and torch.isinf(nonfinite).sum() == 2


def test_kinds_and_bounds_by_dim_name():
    op = opgate.Operator(
        "gather", reference=lambda t, i: t[i],
        inputs=[opgate.TensorSpec("table", ("V", "D"), kind="positive"),
                opgate.TensorSpec("idx", ("B",), dtype="int64", kind="index", high="V"),
                opgate.TensorSpec("q", ("B",), dtype="int8", kind="integer"),
                opgate.TensorSpec("c", ("B",), kind="constant", low=2.5),
                opgate.Scalar("eps", 1e-6)],
        dims={"V": [7], "D": [4], "B": [64]})
    generated = make_inputs(op, Case.make({"V": 7, "D": 4, "B": 64}, 0), "float32")
    table, idx, q, c, eps = generated.values
    assert (table > 0).all()
    assert idx.dtype == torch.int64 and idx.min() >= 0 and idx.max() < 7
    assert q.dtype == torch.int8
    assert (c == 2.5).all()
    assert eps == 1e-6 and generated.truth[4] == 1e-6


def test_index_kind_without_high_is_a_spec_error():
    with pytest.raises(SpecError, match="kind='index' but no high="):
        opgate.Operator("g", reference=lambda i: i,
                        inputs=[opgate.TensorSpec("i", ("N",), dtype="int64", kind="index")], dims={"N": [4]})


def test_bound_naming_an_unknown_dim_is_a_spec_error():
    with pytest.raises(SpecError, match="neither a number nor a dim"):
        opgate.Operator("g", reference=lambda i: i,
                        inputs=[opgate.TensorSpec("i", ("N",), dtype="int64", kind="index", high="V")],
                        dims={"N": [4]})


def test_case_round_trips_through_a_dict():
    case = Case.make({"M": 3, "N": 17}, 9, "tiny", "strided", "edge")
    assert Case.from_dict(case.to_dict()) == case
    assert math.prod(v for _, v in case.dims) == 51


def test_every_regime_also_meets_a_size_past_the_block_caps(softmax_op):
    """A kernel's multi-tile path (taken only above its block size) must meet every value regime."""
    cases = plan_cases(softmax_op, "standard")
    big = [c for c in cases if c.dims_dict["N"] > 16384]
    assert big, "no case past the common 16K block cap"
    for regime in applicable_regimes(softmax_op):
        assert any(c.regime == regime for c in big), regime
    assert max(c.dims_dict["N"] for c in big) in (65535, 65537)


def test_zero_sizes_are_accepted_and_planned():
    op = opgate.Operator("argmax", reference=lambda x: x.argmax(-1), inputs=[opgate.TensorSpec("x", ("M", "N"))],
                         dims={"M": [0, 32], "N": [16]})
    cases = plan_cases(op, "quick")
    # the outer dim (an empty batch) gets a size-0 case; the innermost (reduced) one does not
    assert any(c.dims_dict["M"] == 0 for c in cases) and not any(c.dims_dict["N"] == 0 for c in cases)
    empty = make_inputs(op, Case.make({"M": 0, "N": 16}, 1), "float32")
    assert empty.values[0].shape == (0, 16)


def test_derived_dims_shape_inputs():
    op = opgate.Operator("rope", reference=lambda x, c: x, dims={"S": [8], "D": [64]},
                         derived_dims={"H": lambda D: D // 2},
                         inputs=[opgate.TensorSpec("x", ("S", "D")), opgate.TensorSpec("cos", ("S", "H"))])
    generated = make_inputs(op, Case.make({"S": 8, "D": 10}, 1), "float32")
    assert generated.values[1].shape == (8, 5)
    assert all("H" not in c.dims_dict for c in plan_cases(op, "quick"))


def test_index_inputs_hit_the_argmax_of_their_target():
    op = opgate.Operator("ce", reference=lambda x, t: x, dims={"M": [256], "V": [50]},
                         inputs=[opgate.TensorSpec("x", ("M", "V"), kind="logits"),
                                 opgate.TensorSpec("t", ("M",), dtype="int64", kind="index", high="V", hits="x")])
    generated = make_inputs(op, Case.make({"M": 256, "V": 50}, 3), "float32")
    hit = (generated.values[1] == generated.values[0].argmax(-1)).float().mean()
    assert 0.35 < float(hit) < 0.7
    # peaked: rows 0, 1 of every 4 hit (a saturated and a moderate row), rows 2, 3 miss
    peaked = make_inputs(op, Case.make({"M": 256, "V": 50}, 3, regime="peaked"), "float32")
    hits = peaked.values[1] == peaked.values[0].argmax(-1)
    assert bool(hits[0::4].all()) and bool(hits[1::4].all())


def test_peaked_and_mixed_regimes():
    op = opgate.Operator("s", reference=lambda x: x, inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")],
                         dims={"M": [64], "N": [32]})
    peaked = make_inputs(op, Case.make({"M": 64, "N": 32}, 2, regime="peaked"), "float32").truth[0]
    top2 = peaked.topk(2, dim=-1).values
    assert bool(((top2[0::2, 0] - top2[0::2, 1]) > 10).all())  # even rows: one saturated entry
    off_peak = 1 - peaked.softmax(dim=-1).amax(dim=-1)
    assert torch.allclose(off_peak[1::2], torch.full((32,), math.exp(-7.0), dtype=torch.float64), rtol=1e-3)
    mixed = make_inputs(op, Case.make({"M": 64, "N": 32}, 2, regime="mixed"), "float32").truth[0]
    assert bool((mixed.abs().amax(-1) > 1e7).all()) and bool((mixed.abs().amin(-1) < 10).all())


def test_the_mixed_regimes_high_values_stay_within_a_declared_max_magnitude():
    """A declared max_magnitude is the caller's contract: the mixed regime's high values sit at it, not at 1e8;
    the kind's default promise (1e4 for logits) does not cap them."""
    def mixed(**spec):
        op = opgate.Operator("s", reference=lambda x: x, dims={"M": [64], "N": [32]},
                             inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits", **spec)])
        return make_inputs(op, Case.make({"M": 64, "N": 32}, 2, regime="mixed"), "bfloat16").truth[0]

    capped = mixed(max_magnitude=16)
    assert float(capped.abs().max()) <= 16 and bool((capped.abs().amax(-1) == 16).all())
    assert bool((capped.abs().amin(-1) < 10).all())
    assert bool((mixed().abs().amax(-1) > 1e7).all())
    assert bool((mixed(max_magnitude=1e9).abs().amax(-1) > 1e7).all())


def test_spec_rejects_bad_new_fields():
    with pytest.raises(SpecError, match="hits"):
        opgate.Operator("x", reference=lambda a, b: a, dims={"M": [4]},
                        inputs=[opgate.TensorSpec("t", ("M",), dtype="int64", kind="index", high=4, hits="nope"),
                                opgate.TensorSpec("x", ("M", 4))])
    with pytest.raises(SpecError, match="nan_policy"):
        opgate.Operator("x", reference=lambda a: a, dims={"M": [4]}, inputs=[opgate.TensorSpec("x", ("M",))],
                        nan_policy="drop")
    with pytest.raises(SpecError, match="derived"):
        opgate.Operator("x", reference=lambda a: a, dims={"M": [4]}, inputs=[opgate.TensorSpec("x", ("M",))],
                        derived_dims={"H": lambda Q: Q})


def _logits_op(reference):
    return opgate.Operator("masked_probe", reference=reference,
                           inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")],
                           dims={"M": [4], "N": [256]}, dtypes=["float32"])


def test_masked_logits_have_tile_long_runs_of_minus_inf_and_reach_the_big_size_with_several_rows():
    op = _logits_op(lambda x: torch.logsumexp(x, -1))
    masked = [c for c in plan_cases(op, "quick") if c.regime == "masked"]
    assert {c.dims_dict["N"] for c in masked} >= {256, 16385}
    big = next(c for c in masked if c.dims_dict["N"] == 16385)
    assert big.dims_dict["M"] == 3  # as many rows as the quick cap allows (3 x 16385 <= 2^16)
    x = make_inputs(op, big, "float32").truth[0]
    ninf = torch.isneginf(x)
    assert not bool(torch.isnan(x).any()) and not bool(torch.isposinf(x).any())
    assert bool(ninf[0, :8192].all())  # left padding: the first tile of any kernel with tiles up to 8192
    assert bool(ninf[1, -8192:].all()) and not bool(ninf[1, 0])  # right padding, first column finite
    assert bool(ninf[2].all())  # logsumexp of a fully masked row is -inf: defined, so the row is kept
    assert make_inputs(op, big, "float32").truth[0].equal(x)  # deterministic


def test_masked_inputs_leave_out_fully_masked_rows_where_the_truth_is_undefined():
    op = _logits_op(lambda x: torch.softmax(x, -1))  # softmax of an all -inf row is 0/0
    for case in (c for c in plan_cases(op, "quick") if c.regime == "masked"):
        x = make_inputs(op, case, "float32").truth[0]
        assert not bool(torch.isneginf(x).all(dim=-1).any()), case.label()
        assert bool(torch.isneginf(x).any()) and not bool(torch.softmax(x, -1).isnan().any())


def test_no_masked_regime_when_the_op_does_not_take_nonfinite_inputs():
    op = opgate.Operator("m", reference=lambda x: torch.softmax(x, -1),
                         inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")], dims={"M": [4], "N": [64]},
                         propagates_nonfinite=False)
    assert "masked" not in applicable_regimes(op)
    assert "masked" not in applicable_regimes(opgate.Operator(
        "n", reference=lambda x: x, inputs=[opgate.TensorSpec("x", ("N",))], dims={"N": [8]}))  # normal kind


def test_no_case_leaves_an_index_input_without_values():
    # an embedding table fuzzed to V = 0 cannot be indexed; a lengths input in [1, L + 1) has no value at L = 0
    embedding = opgate.Operator(
        "embedding", reference=lambda w, i: w[i],
        inputs=[opgate.TensorSpec("w", ("V", "D")), opgate.TensorSpec("i", ("M",), dtype="int64", kind="index",
                                                                      high="V")],
        dims={"V": [100, 37], "D": [64], "M": [7]})
    lengths = opgate.Operator(
        "masked_mean", reference=lambda x, n: x.sum(-1) / n,
        inputs=[opgate.TensorSpec("x", ("B", "L")),
                opgate.TensorSpec("n", ("B",), dtype="int64", kind="index", low=1, high="L1")],
        dims={"B": [4], "L": [7, 33]}, derived_dims={"L1": lambda L: L + 1})
    for op in (embedding, lengths):
        for budget in ("quick", "standard"):
            cases = plan_cases(op, budget)
            assert cases
            for case in cases:
                make_inputs(op, case, "float32")  # raised SpecError ("low must be below high") for V = 0, L = 0


def test_mixed_layout_strides_every_second_input():
    # a kernel that reads u through g's strides is right whenever both share a layout (vllm-project/vllm#3324)
    op = opgate.Operator("swiglu", reference=lambda g, u: torch.nn.functional.silu(g) * u,
                         inputs=[opgate.TensorSpec("g", ("M", "N")), opgate.TensorSpec("u", ("M", "N"))],
                         dims={"M": [4], "N": [64]})
    assert "mixed" in applicable_layouts(op)
    mixed = [c for c in plan_cases(op, "quick") if c.layout == "mixed"]
    assert mixed
    generated = make_inputs(op, mixed[0], "float32")
    g, u = generated.laid_out
    assert g.is_contiguous() and not u.is_contiguous()
    assert generated.layout_applied == ["contiguous", "strided"]
    single = opgate.Operator("neg", reference=lambda x: -x, inputs=[opgate.TensorSpec("x", ("N",))], dims={"N": [8]})
    assert "mixed" not in applicable_layouts(single)


# -- defaults a user does not ask for by name (issue #26) --------------------------------------------------------

def _ce_op(**label_options):
    import torch

    return opgate.Operator(
        "ce", reference=lambda x, y: torch.nn.functional.cross_entropy(x, y, reduction="none"),
        inputs=[opgate.TensorSpec("x", ("M", "V"), kind="logits"),
                opgate.TensorSpec("y", ("M",), dtype="int64", kind="index", high="V", **label_options)],
        dims={"M": [64], "V": [1000, 32000]})


def test_labels_beside_their_logits_hit_the_argmax_by_default_and_hits_false_turns_it_off():
    from opgate.verify.inputs import Case, make_inputs

    case = Case.make({"M": 64, "V": 1000}, 3)
    for options, low, high in (({}, 0.3, 0.7), ({"hits": False}, 0.0, 0.05)):
        op = _ce_op(**options)
        x, y = make_inputs(op, case, "float32").values
        share = float((x.argmax(-1) == y).float().mean())
        assert low <= share <= high, (options, share)
    assert _ce_op().hits_target(_ce_op().inputs[1]) == "x"


def test_hits_true_or_a_number_is_a_spec_error():
    with pytest.raises(SpecError, match="hits="):
        opgate.TensorSpec("y", ("M",), kind="index", high="V", hits=True)


def test_the_masked_regime_meets_every_multi_tile_row_size_of_the_plan():
    from opgate.verify.inputs import MASKED_TILE_SIZE, plan_cases

    op = _ce_op()
    for budget in ("quick", "standard"):
        cases = plan_cases(op, budget)
        row_sizes = {c.dims_dict["V"] for c in cases if c.dims_dict["V"] > MASKED_TILE_SIZE}
        masked = {c.dims_dict["V"] for c in cases if c.regime == "masked"}
        assert row_sizes <= masked, (budget, row_sizes - masked)


def test_a_freed_reference_s_id_does_not_decide_another_reference_s_masked_rows():
    """The masked regime asks the reference once whether fully masked rows have a defined truth, keyed by the
    reference's id: a logsumexp lambda freed and a softmax lambda given its id (same operator name, one process)
    got logsumexp's answer, so softmax saw fully masked rows (0/0), an order-dependent failure under pytest-xdist."""
    import gc

    logsumexp_op = _logits_op(lambda x: torch.logsumexp(x, -1))  # fully masked rows defined (-inf)
    masked = [c for c in plan_cases(logsumexp_op, "quick") if c.regime == "masked"]
    for case in masked:
        make_inputs(logsumexp_op, case, "float32")
    freed_id = id(logsumexp_op.reference)
    del logsumexp_op
    gc.collect()
    kept = []  # new functions until one takes the freed id (CPython reuses the freed memory at once, usually)
    for _ in range(2000):
        kept.append(lambda x: torch.softmax(x, -1))
        if id(kept[-1]) == freed_id:
            break
    softmax_op = _logits_op(kept[-1])
    for case in masked:
        x = make_inputs(softmax_op, case, "float32").truth[0]
        assert not bool(torch.isneginf(x).all(dim=-1).any()), case.label()


def test_a_draw_in_range_converts_as_is_and_one_past_the_range_saturates_keeping_its_nan_and_inf():
    """_to_dtype skips isfinite/clamp/where when one aminmax pass shows nothing to saturate: the same bits."""
    import math

    from opgate.verify.inputs import _to_dtype

    values = torch.randn(1000, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 100
    for dtype in ("float16", "bfloat16", "float32"):
        assert torch.equal(_to_dtype(values, dtype), values.to(getattr(torch, dtype)))
    wide = values.clone()
    wide[:4] = torch.tensor([1e6, -1e6, math.inf, math.nan], dtype=torch.float64)
    half = _to_dtype(wide, "float16")
    assert half[0] == 65504 and half[1] == -65504 and half[2] == math.inf and half[3].isnan()
    assert torch.equal(half[4:], values[4:].to(torch.float16))
    assert _to_dtype(torch.empty(0, dtype=torch.float64), "float16").dtype == torch.float16
