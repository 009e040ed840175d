"""Replay tokens and shrinking, without child processes."""

from __future__ import annotations

import pytest

from opgate.model.errors import InputError
from opgate.verify.inputs import Case
from opgate.verify.replay import PREFIX, ReplayToken
from opgate.verify.shrink import candidate_sizes, shrink_case


def test_token_round_trips_and_stays_compact():
    case = Case.make({"M": 1, "N": 1023}, 5, "large", "strided", "shrunk")
    token = ReplayToken("softmax", "triton", "float16", case, "standard", 7)
    text = token.encode()
    assert text.startswith(PREFIX) and len(text) < 220 and "=" not in text
    back = ReplayToken.decode(text)
    assert (back.op, back.impl, back.dtype, back.budget, back.plan_seed) == ("softmax", "triton", "float16",
                                                                            "standard", 7)
    assert back.case.dims == case.dims and back.case.seed == 5
    assert (back.case.regime, back.case.layout, back.case.origin) == ("large", "strided", "replay")


@pytest.mark.parametrize("bad", ["hello", "ogv1.!!!", "ogv1.e30"])
def test_damaged_tokens_are_input_errors(bad):
    with pytest.raises(InputError, match="--replay"):
        ReplayToken.decode(bad)


def test_shrinking_finds_the_smallest_tail_failure(softmax_op):
    # A tail bug: fails whenever N is not a multiple of 16, regardless of M.
    calls = []

    def fails(case: Case) -> bool:
        calls.append(case)
        return case.dims_dict["N"] % 16 != 0

    start = Case.make({"M": 8, "N": 1023}, 3, "typical", "strided", "edge")
    result = shrink_case(softmax_op, start, fails)
    assert result.case.dims_dict == {"M": 1, "N": 1}
    assert result.case.layout == "contiguous" and result.case.origin == "shrunk"
    assert result.attempts == len(calls) <= 40
    assert "M: 8 -> 1" in result.steps and "N: 1023 -> 1" in result.steps


def test_shrinking_keeps_what_the_failure_needs(softmax_op):
    def fails(case: Case) -> bool:  # needs N > 128 and the large regime
        return case.dims_dict["N"] > 128 and case.regime == "large"

    result = shrink_case(softmax_op, Case.make({"M": 8, "N": 1024}, 1, "large"), fails)
    assert result.case.dims_dict == {"M": 1, "N": 129}
    assert result.case.regime == "large"


def test_exact_dims_shrink_only_to_declared_sizes():
    import opgate

    op = opgate.Operator("a", reference=lambda x: x, inputs=[opgate.TensorSpec("x", ("D",))],
                         dims={"D": [64, 128]}, exact_dims=["D"])
    assert candidate_sizes(op, "D", 128) == [64]
