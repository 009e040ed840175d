"""Documented deviations are `warned` with their class; real bugs still fail with theirs (issue: verdict truth I)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "verify"


@pytest.fixture(scope="module")
def report(tmp_path_factory, opgate_env_module) -> dict:
    out = tmp_path_factory.mktemp("deviations")
    proc = subprocess.run(
        [sys.executable, "-m", "opgate", "verify", str(DATA / "deviation_spec.py"), "--budget", "quick",
         "--no-extras", "--stages", "numerics", "--out", str(out / "r"), "--json", str(out / "report.json")],
        capture_output=True, text=True, timeout=1200, env=opgate_env_module)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return {r["check_id"]: r for r in json.loads((out / "report.json").read_text())["results"]}


@pytest.fixture(scope="module")
def opgate_env_module() -> dict[str, str]:
    import os

    from opgate_testing import child_pythonpath

    env = dict(os.environ)
    env["PYTHONPATH"] = child_pythonpath()
    return env


def _deviations(result: dict) -> set[str]:
    return {d["class"] for d in result["extra"].get("deviations", [])}


def test_flush_to_zero_is_a_documented_deviation(report):
    result = report["verify.double.ftz.float32"]
    assert result["outcome"] == "warned", result["reason"]
    assert _deviations(result) == {"ftz"}


def test_exact_subnormals_make_flush_to_zero_a_failure(report):
    result = report["verify.double_exact.ftz.float32"]
    assert result["outcome"] == "failed", result["reason"]


def test_an_overflow_far_outside_the_promised_range_is_a_range_limit(report):
    result = report["verify.unit_rows.naive_sumsq.float32"]
    assert result["outcome"] == "warned", result["reason"]
    assert _deviations(result) == {"range_limit"}  # overflow above ~1e18 and underflow below ~1e-19
    assert "bisected" in result["reason"]


def test_softmax_without_max_subtraction_still_fails_as_a_range_bug(report):
    result = report["verify.softmax.no_max.float32"]
    assert result["outcome"] == "failed", result["reason"]
    assert result["extra"]["failure_class"] == "range"
    assert "bisected" in result["reason"]


def test_nan_converted_to_an_integer_is_not_judged(report):
    result = report["verify.quantize.saturating.float32"]
    assert result["outcome"] == "passed", result["reason"]
    assert result["extra"]["undefined_elements"] > 0


def test_nan_policy_ignore_allows_dropping_nans_and_propagate_does_not(report):
    assert report["verify.rowmax.fmax.float32"]["outcome"] == "passed", report["verify.rowmax.fmax.float32"]["reason"]
    strict = report["verify.rowmax_strict.fmax.float32"]
    assert strict["outcome"] == "failed" and strict["extra"]["failure_class"] == "nonfinite", strict["reason"]


def test_a_float32_blockwise_scan_is_correct_up_to_the_float32_range(report):
    """Constant rows and long rows pass the accumulation bound; only partial sums beyond float32's range
    (|x| ~1e37 over 65535 terms) break it: a documented range limit, not a failure."""
    result = report["verify.cumsum.blockwise.float32"]
    assert result["outcome"] in ("passed", "warned"), result["reason"]
    assert _deviations(result) <= {"range_limit"}
    assert all(c["passed"] for c in result["extra"]["cases"] if "constant_rows" in c["case"] or "typical" in c["case"])


def test_an_element_never_written_is_unwritten_and_a_computed_nan_is_nonfinite(report):
    """Without out=, opgate fills torch.empty with NaN; when NaN comes out it calls again with a second poison."""
    unwritten = report["verify.double.tail_unwritten.float32"]
    assert unwritten["outcome"] == "failed" and unwritten["extra"]["failure_class"] == "unwritten", unwritten["reason"]
    assert "never written" in unwritten["reason"]
    computed = report["verify.double.tail_nan.float32"]
    assert computed["outcome"] == "failed" and computed["extra"]["failure_class"] == "nonfinite", computed["reason"]


def test_masked_logits_catch_the_unguarded_multi_tile_softmax_and_pass_torch(report):
    """Runs of -inf a tile long (left padding) at N = 16385: the multi-tile path's exp(-inf - -inf) = NaN."""
    assert report["verify.softmax_masked.torch.float32"]["outcome"] == "passed", \
        report["verify.softmax_masked.torch.float32"]["reason"]
    bad = report["verify.softmax_masked.lanewise_unguarded.float32"]
    assert bad["outcome"] == "failed" and bad["extra"]["failure_class"] == "nonfinite", bad["reason"]
    failing = [c["case"] for c in bad["extra"]["cases"] if not c["passed"]]
    assert failing and all("masked" in c for c in failing), failing


def test_a_fully_masked_row_is_judged_where_the_reference_defines_it(report):
    """logsumexp of an all -inf row is -inf (defined, judged); softmax's is 0/0 (left out of the inputs)."""
    assert report["verify.logsumexp.torch.float32"]["outcome"] == "passed", \
        report["verify.logsumexp.torch.float32"]["reason"]
    bad = report["verify.logsumexp.unguarded.float32"]
    assert bad["outcome"] == "failed" and bad["extra"]["failure_class"] == "nonfinite", bad["reason"]
    assert any("masked" in c["case"] and not c["passed"] for c in bad["extra"]["cases"])


def test_the_bisection_tells_a_break_at_the_start_from_one_scaled_values_never_reach() -> None:
    from opgate.verify.deviations import NOT_REPRODUCED, bisect_breaking_scale

    assert bisect_breaking_scale(lambda s: s > 1e20, 1.0, 1e36) == pytest.approx(1e20, rel=0.5)
    assert bisect_breaking_scale(lambda s: True, 1.0, 1e36) is None  # fails unscaled: not a range effect
    # passes even at `far`: the failing case's own values decide (fla's group norm at a `huge` case, library corpus)
    assert bisect_breaking_scale(lambda s: False, 1.0, 1e36) == NOT_REPRODUCED


def test_a_layout_refused_with_an_explicit_error_is_a_layout_limit_and_other_errors_still_fail(report):
    refused = report["verify.row_scale.refuses_views.float32"]
    assert refused["outcome"] == "warned", refused["reason"]
    assert _deviations(refused) == {"layout_limit"}
    assert "must be contiguous" in refused["reason"] and "contiguous=True" in refused["reason"]
    broken = report["verify.row_scale.breaks_on_views.float32"]  # an accidental error on the same layouts
    assert broken["outcome"] == "failed" and "not enough values to unpack" in broken["reason"]
    viewed = report["verify.row_scale.views_a_view.float32"]  # PyTorch's view error names strides, by accident
    assert viewed["outcome"] == "failed" and "view size is not compatible" in viewed["reason"], viewed["reason"]
    wrong = report["verify.row_scale.reads_storage_order.float32"]  # a silent wrong answer
    assert wrong["outcome"] == "failed" and wrong["extra"].get("failure_class") == "layout", wrong["reason"]


@pytest.mark.parametrize("reason, refusal", [
    ("raised AssertionError: cos must be contiguous at the last dimension", True),          # FlagGems' rotary
    ("raised RuntimeError: x must be contiguous", True),                                     # TORCH_CHECK in an extension
    ("raised ValueError: expected a contiguous tensor, got strides (1, 4)", True),
    ("raised RuntimeError: view size is not compatible with input tensor's size and stride (at least one dimension "
     "spans across two contiguous subspaces). Use .reshape(...) instead.", False),           # an accident
    ("raised ValueError: not enough values to unpack (expected 3, got 0)", False),           # FlagGems' CE backward
    ("out0: RMSE 1 > budget 5e-06", False),
])
def test_a_layout_refusal_states_a_requirement(reason: str, refusal: bool) -> None:
    from opgate.verify.check import _is_layout_refusal

    assert _is_layout_refusal(reason) is refusal
