"""Case planning and input generation: deterministic, op-aware, honest about layouts and regimes."""

from __future__ import annotations

import math

import pytest
import torch

import opgate
from opgate.verify.inputs import (
    BUDGETS, Case, applicable_layouts, applicable_regimes, case_counts, edge_sizes, make_inputs, plan_cases,
)
from opgate.verify.spec import SpecError


def test_case_counts_per_budget_grow_and_match_the_documented_numbers(softmax_op):
    counts = case_counts(softmax_op)
    assert counts == {"quick": 18, "standard": 44, "thorough": 97}
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
    assert {c.regime for c in cases} == {"typical", "large", "huge", "tiny", "constant_rows", "ties", "nonfinite"}
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
