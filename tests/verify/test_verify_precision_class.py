"""A precision deficit against eager is `[precision]`, forward or backward, with the factor over eager, where its
failing cases concentrate and the likely cause; a wrong formula stays `[gradient]` / `[typical]`.

The finding is rendered from plain verdicts (deviations.precision_finding) and, end to end, from
tests/data/verify/precision_spec.py: a bfloat16 softmax whose backward sums dy * y in bfloat16, a divergence that
sums its float32 terms in bfloat16 and returns float32, and wrong-formula twins of both.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from opgate.verify.calibrate import CaseVerdict, OutputBudget
from opgate.verify.compare import OutputStats
from opgate.verify.deviations import numeric_failure, precision_finding
from opgate.verify.inputs import Case
from tests_verify_support import DATA, ROOT, SRC

DECLARED = {"M": [4], "N": [64, 200]}


def _failing(regime: str, rmse: float, eager: float, n: int = 64) -> tuple[Case, CaseVerdict]:
    budget = OutputBudget(rmse=2 * eager + 1e-6, quantile=1.0, scale=1.0, baseline_rmse=eager, baseline_quantile=0.5,
                          fan_in=n)
    stats = OutputStats("out", 256, compared=256, truth_rms=1.0, rmse=rmse, quantile_abs=0.1)
    reason = f"RMSE {rmse:.3g} > budget {budget.rmse:.3g}"
    return Case.make({"M": 4, "N": n}, 0, regime), CaseVerdict(False, (reason,), (stats,), (budget,),
                                                               rmse / budget.rmse)


def test_the_finding_names_the_factor_over_eager_where_it_concentrates_and_the_cause():
    failing = [_failing("constant_rows", 2.3e-3, 1e-3), _failing("ties", 2.2e-3, 1e-3),
               _failing("typical", 2.1e-3, 1e-3)]
    planned = [c for c, _ in failing] + [Case.make({"M": 4, "N": 64}, s, "typical") for s in range(1, 12)]
    finding = precision_finding(failing, planned, "bfloat16", ["bfloat16"], DECLARED, "passes")
    text = finding.text()
    assert text.startswith("rounding, not a wrong formula: RMSE 2.3x eager's error in the same case (1.15x its budget")
    assert "concentrated in near-uniform rows (constant_rows 1/1, ties 1/1, typical 1/12 cases)" in text
    assert "a reduction accumulated in bfloat16 (eager accumulates in float32)" in text
    assert "in float32 passes these cases" in text
    assert finding.to_dict()["float32_rerun"] == "passes" and json.dumps(finding.to_dict())


def test_eager_exact_in_the_worst_case_reports_the_median_factor_and_a_wider_output():
    failing = [_failing("typical", 1e-3, 0.0), _failing("typical", 3e-4, 1e-6), _failing("large", 2e-4, 2e-6)]
    finding = precision_finding(failing, [c for c, _ in failing], "bfloat16", ["float32"], DECLARED, "")
    assert math.isclose(finding.factor_over_eager, 200.0) and finding.factor_note == "median over the failing cases"
    assert "before a float32 output" in finding.cause
    assert "spread over the plan" in finding.text()


def test_only_figures_over_their_budget_are_rounding_evidence():
    assert numeric_failure(["RMSE 0.01 > budget 0.001", "out1: p99.9 |error| 2 > budget 1"])
    assert numeric_failure(["1/20 sampled element(s) beyond their own bound; worst at flat index 3: error 0.1 > "
                            "budget 0.01 (truth 1, componentwise)"])
    assert not numeric_failure(["3 NaN/Inf where the truth is finite", "RMSE 0.01 > budget 0.001"])
    assert not numeric_failure(["raised ValueError: no"])
    assert not numeric_failure(["4 element(s) differ (budget 0)"])
    assert not numeric_failure([])


# -- end to end ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def precision_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("verify-precision")
    # no bound terms deferred either: which cases a loaded machine defers changes the pooled figures the finding's
    # location is read against (the phrase "concentrated in ... near-uniform rows" came and went with the load)
    env = {**os.environ, "PYTHONPATH": str(SRC), "OPGATE_DEFER_BOUNDS_S": "0"}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, "-m", "opgate", "verify", str(DATA / "precision_spec.py"), "--budget",
                           "quick", "--stages", "numerics", "--no-extras", "--json", str(out / "report.json"), "--out",
                           # no time budget: on a loaded machine it capped the cases that locate the finding
                           str(out / "art"), "--time-budget", "0"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    results = {r["check_id"]: r for r in json.loads((out / "report.json").read_text())["results"]}
    return proc, results


@pytest.mark.slow
def test_a_backward_summing_in_bfloat16_is_precision_with_its_factor_and_near_uniform_rows(precision_run):
    proc, results = precision_run
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = results["verify.softmax.grad.bf16_backward_sum.bfloat16"]
    assert result["outcome"] == "failed" and result["extra"]["failure_class"] == "precision", result["reason"]
    reason = result["reason"]
    assert reason.startswith("[precision] rounding, not a wrong formula: ") and "x eager's error in the same case" in reason
    assert "concentrated in" in reason and "near-uniform rows" in reason  # where: constant rows (and tiny values)
    assert "a reduction accumulated in bfloat16 (eager accumulates in float32)" in reason
    finding = result["extra"]["precision"]
    assert finding["float32_rerun"] == "passes" and 1.0 < finding["budget_ratio"] < 20.0
    assert "gradient formula" not in result["remediation"] and "accumulate reductions in float32" in result["remediation"]
    assert results["verify.softmax.bf16_backward_sum.bfloat16"]["outcome"] == "passed"  # its forward is eager's


@pytest.mark.slow
def test_wrong_backward_formulas_stay_gradient_failures(precision_run):
    _, results = precision_run
    for impl in ("backward_without_the_sum", "backward_ignores_upstream"):
        result = results[f"verify.softmax.grad.{impl}.bfloat16"]
        assert result["outcome"] == "failed" and result["extra"]["failure_class"] == "gradient", result["reason"]
        assert "precision" not in result["extra"]
    assert results["verify.softmax.grad.torch.bfloat16"]["outcome"] == "passed"


@pytest.mark.slow
def test_a_divergence_summed_in_bfloat16_into_float32_is_precision_hundreds_of_times_over(precision_run):
    _, results = precision_run
    result = results["verify.kl_div.bf16_sum.bfloat16"]
    assert result["outcome"] == "failed" and result["extra"]["failure_class"] == "precision", result["reason"]
    finding = result["extra"]["precision"]
    assert finding["budget_ratio"] > 100 and finding["float32_rerun"] == "passes"
    assert "before a float32 output" in result["reason"] and "x eager's error" in result["reason"]
    wrong = results["verify.kl_div.wrong_sign.bfloat16"]
    assert wrong["outcome"] == "failed" and wrong["extra"]["failure_class"] == "typical", wrong["reason"]
    assert results["verify.kl_div.torch.bfloat16"]["outcome"] == "passed"


def test_an_elementwise_precision_loss_is_blamed_on_its_formula_not_on_a_reduction() -> None:
    """fla's logsigmoid (log(1 + e^-x) in float32, library corpus) has no reduction: its cause line must not name
    one (each output depends on one input: fan-in 1)."""
    from opgate.verify.deviations import _likely_cause

    elementwise = _likely_cause("float32", [], 1, "")
    assert "elementwise formula" in elementwise and "accumulat" not in elementwise
    assert "accumulation" in _likely_cause("float32", [], 4096, "")
    assert "reduction accumulated in bfloat16" in _likely_cause("bfloat16", [], 4096, "")
    # in bfloat16, an elementwise output that float32 gets wrong too is the formula's loss, not a bfloat16 rounding
    # (fla's logsigmoid in bfloat16: 0 for x >= 13.1 as in float32)
    bf16_formula = _likely_cause("bfloat16", [], 1, "fails")
    assert "elementwise formula" in bf16_formula and "rounded to bfloat16" not in bf16_formula
    assert "still fails" in bf16_formula
    assert "rounded to bfloat16" in _likely_cause("bfloat16", [], 1, "passes")  # float32 fine: the rounding is


def test_a_failure_whose_error_falls_with_the_dtypes_precision_is_rounding_even_where_float32_fails_too() -> None:
    """cut-cross-entropy's loss at V = 1 (eager exact: 0) is off by the target logit's bfloat16 products: in float32
    the error falls 39-5000x yet stays over the budget. A wrong mask or formula keeps its error in float32."""
    from opgate.verify.deviations import FLOAT32_SHRINK, _likely_cause, shrinks_in_float32

    def stats(max_abs: float, rmse: float, **kw) -> OutputStats:
        return OutputStats("out", 4, compared=4, max_abs=max_abs, rmse=rmse, **kw)

    assert shrinks_in_float32([stats(24.4, 15.5)], [stats(0.62, 0.49)])  # 39x: float32's own accumulation stays
    assert not shrinks_in_float32([stats(0.5, 0.3)], [stats(0.45, 0.3)])  # a mask's error: the same in float32
    assert not shrinks_in_float32([stats(1.0, 1.0)], [stats(2 / FLOAT32_SHRINK, 0.01)])  # the largest error stays
    assert not shrinks_in_float32([stats(1.0, 1.0)], [stats(0.0, 0.0, unwritten=3)])  # no rounding explains these
    assert shrinks_in_float32([stats(1.0, 1.0), stats(0.0, 0.0)], [stats(0.01, 0.01), stats(0.0, 0.0)])
    assert not shrinks_in_float32([], [])
    cancels = _likely_cause("bfloat16", ["float32"], 256, "shrinks", eager_exact=True)
    assert "one side of a difference where eager's roundings cancel" in cancels and "formula is right" in cancels
    assert "reduction accumulated in bfloat16" in _likely_cause("bfloat16", [], 256, "shrinks")


@pytest.mark.slow
def test_a_target_logit_from_rounded_products_is_precision_not_a_tail_or_a_formula(precision_run):
    _, results = precision_run
    result = results["verify.target_loss.rounded_target.bfloat16"]
    assert result["outcome"] == "failed" and result["extra"]["failure_class"] == "precision", result["reason"]
    finding = result["extra"]["precision"]
    assert finding["float32_rerun"] == "shrinks" and finding["factor_over_eager"] == "inf"
    assert "where the truth is 0" in result["reason"] and "roundings cancel" in result["reason"]
    assert "tail mask" not in result["remediation"] and "form both from the same float32 values" in result["remediation"]
    assert results["verify.target_loss.torch.bfloat16"]["outcome"] == "passed"
