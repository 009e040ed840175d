"""Calibration: budgets from the eager baseline's error against the float64 truth, and the judge."""

from __future__ import annotations

import math

import pytest
import torch

import opgate
from opgate.core import dtypes as dt
from opgate.verify.calibrate import (
    FLOOR_EPS, K_QUANTILE, K_RMSE, CalibrationError, baseline_lost_mask, calibrate, judge_case, truth_and_baseline,
)
from opgate.verify.inputs import plan_cases
from opgate.core.spec import SpecError


def _calibrated(op, dtype, budget="quick"):
    cases = plan_cases(op, budget)
    pairs = [truth_and_baseline(op, c, dtype) for c in cases]
    truths = [t for t, _ in pairs]
    baselines = [b for _, b in pairs]
    return cases, truths, baselines, calibrate(op, dtype, cases, truths, baselines)


def _judge(cal, i, candidate, truths, op=None):
    return judge_case([candidate], truths[i], cal.budgets[i], cal.out_dtypes, cal.masks[i],
                      op.quantized if op else None)


def test_budget_follows_the_documented_formula(softmax_op):
    cases, truths, baselines, cal = _calibrated(softmax_op, "float16")
    assert cal.n_cases == len(cases)
    eps = dt.eps("float16")
    for case_index, (stats, budget) in enumerate(zip(cal.baseline, cal.budgets)):
        s, b = stats[0], budget[0]
        tiny = dt.smallest_normal("float16") * eps
        expected = (max(K_RMSE * max(s.rmse, cal.pooled_rmse[0] * s.truth_rms, b.sensitivity_rmse),
                        b.accumulation_rmse)
                    + FLOOR_EPS["float16"] * eps * s.truth_rms)
        assert math.isclose(b.rmse, expected + tiny, rel_tol=1e-12), case_index
        expected_q = (max(K_QUANTILE * max(s.quantile_abs, cal.pooled_quantile[0] * s.truth_quantile_abs,
                                           b.sensitivity_quantile), b.accumulation_quantile)
                      + FLOOR_EPS["float16"] * eps * s.truth_quantile_abs)
        # softmax is well conditioned: float32-roundoff sensitivity is far below float16's own rounding
        # (the `mixed` regime's 1e8 entries, clamped to float16's range, are where it is not)
        assert (b.sensitivity_rmse < 0.1 * max(s.rmse, cal.pooled_rmse[0] * s.truth_rms) or s.truth_rms == 0
                or cases[case_index].regime == "mixed")
        assert math.isclose(b.quantile, expected_q + tiny, rel_tol=1e-12), case_index
        assert b.rmse_term in ("baseline", "pooled", "sensitivity", "accumulation", "floor")
        assert b.rmse_source.startswith("calibrated: ")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_the_eager_baseline_and_the_rounded_truth_pass_every_case(softmax_op, dtype):
    _, truths, baselines, cal = _calibrated(softmax_op, dtype)
    for i, (truth, baseline) in enumerate(zip(truths, baselines)):
        assert _judge(cal, i, baseline[0], truths).passed
        rounded = truth[0].to(getattr(torch, dtype))
        verdict = _judge(cal, i, rounded, truths)
        assert verdict.passed, (i, verdict.reasons)
        assert verdict.ratio <= 1.0


def test_eight_times_the_baseline_error_fails_in_float16(softmax_op):
    _, truths, baselines, cal = _calibrated(softmax_op, "float16")
    failed = 0
    for i, (truth, baseline) in enumerate(zip(truths, baselines)):
        t, b = truth[0], baseline[0].to(torch.float64)
        if not torch.isfinite(t).all() or (b == t).all():
            continue
        worse = (t + 8 * (b - t)).to(torch.float16)
        failed += not _judge(cal, i, worse, truths).passed
    assert failed >= 10


def test_user_tolerance_override_wins(softmax_op):
    op = opgate.Operator("softmax_tol", reference=softmax_op.reference, inputs=softmax_op.inputs,
                         dims=softmax_op.dims, dtypes=["float16"],
                         tolerance={"float16": {"atol": 1e-2, "rtol": 0.0}})
    _, truths, baselines, cal = _calibrated(op, "float16")
    assert cal.budgets[0][0].is_override and "user tolerance= override" in cal.budgets[0][0].rmse_source
    t = truths[0][0]
    off = t.clone()
    off.view(-1)[0] += 0.05
    verdict = _judge(cal, 0, off.to(torch.float16), truths)
    assert not verdict.passed and "exceed atol" in verdict.reasons[0]
    assert _judge(cal, 0, (t + 0.005).to(torch.float16), truths).passed


def test_override_with_unknown_key_is_a_spec_error(softmax_op):
    op = opgate.Operator("softmax_bad", reference=softmax_op.reference, inputs=softmax_op.inputs,
                         dims=softmax_op.dims, dtypes=["float16"], tolerance={"float16": {"tol": 1e-2}})
    with pytest.raises(SpecError, match="use atol and rtol"):
        _calibrated(op, "float16")


def test_integer_outputs_are_judged_by_differing_elements():
    op = opgate.Operator("argmax", reference=lambda x: torch.argmax(x, dim=-1),
                         inputs=[opgate.TensorSpec("x", ("M", "N"))], dims={"M": [4], "N": [16]},
                         dtypes=["float16"], propagates_nonfinite=False)
    _, truths, baselines, cal = _calibrated(op, "float16")
    assert cal.out_dtypes == ["int64"]
    budget = cal.budgets[0][0]
    assert budget.exact_mismatches == 0
    wrong = truths[0][0].clone()
    wrong[0] = (wrong[0] + 1) % 16
    verdict = _judge(cal, 0, wrong, truths)
    assert not verdict.passed and "1 element(s) differ" in verdict.reasons[0]


def test_quantized_outputs_allow_off_by_one_only_within_the_budget():
    quant = {"scale": 0.05, "zero_point": 0, "dtype": "int8"}
    op = opgate.Operator(
        "quantize", reference=lambda x: torch.clamp(torch.round(x / 0.05), -128, 127).to(torch.int8),
        inputs=[opgate.TensorSpec("x", ("N",), kind="uniform", low=-6, high=6)], dims={"N": [4096]},
        dtypes=["float16"], quantized=quant, propagates_nonfinite=False)
    _, truths, baselines, cal = _calibrated(op, "float16")
    t = truths[0][0]
    assert t.dtype == torch.int8
    assert _judge(cal, 0, t.clone(), truths, op).passed
    two_off = t.clone()
    two_off[:10] = (two_off[:10].to(torch.int16) + 2).clamp(-128, 127).to(torch.int8)
    verdict = _judge(cal, 0, two_off, truths, op)
    assert not verdict.passed and any("more than one quantum" in r for r in verdict.reasons)


def test_a_reference_that_raises_is_a_calibration_error():
    def broken(x):
        if x.shape[-1] == 1:
            raise ValueError("no size 1")
        return x

    op = opgate.Operator("broken", reference=broken, inputs=[opgate.TensorSpec("x", ("N",))], dims={"N": [8]})
    with pytest.raises(CalibrationError, match="raised ValueError on N=1"):
        _calibrated(op, "float32")


def test_elements_eager_cannot_deliver_are_marked_lost():
    from opgate.verify.calibrate import baseline_lost_mask

    # an ordinary case: eager is right up to rounding except a NaN and a missed overflow
    truth = torch.tensor([1.0, 2.0, 1e39, 0.0, 3.0, 1e-8], dtype=torch.float64)
    eager = torch.tensor([1.0, float("nan"), float("nan"), 1e-30, 3.0000002, 2e-8], dtype=torch.float32)
    assert baseline_lost_mask(truth, eager).tolist() == [False, True, True, False, False, False]
    # eager fails the whole case (SDPA returns 0 where QK^T overflows float32): every wrong element is lost
    truth = torch.tensor([-1.15e37, 1.0e36, -1.25e37], dtype=torch.float64)
    eager = torch.zeros(3, dtype=torch.float32)
    assert baseline_lost_mask(truth, eager).tolist() == [True, True, True]


def test_large_regime_stays_far_from_the_float32_range(softmax_op):
    from opgate.verify.inputs import Case, make_inputs

    x = make_inputs(softmax_op, Case.make({"M": 8, "N": 1024}, 1, "large"), "float32").values[0]
    assert 88 < float(x.abs().max()) < 4096 * 6  # exp overflows; products and squares stay in range


def test_ill_conditioned_cases_get_budget_from_input_sensitivity():
    """Layer norm of a constant row amplifies input rounding by 1/sqrt(eps): eager's Welford mean happens
    to be exact there, a correct two-pass kernel is not, and the sensitivity term tells the two apart."""
    from opgate.verify.inputs import Case, make_inputs

    op = opgate.Operator(
        "layernorm", reference=lambda x, w, b, eps: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps),
        inputs=[opgate.TensorSpec("x", ("M", "N"), kind="uniform", low=-1.0, high=3.0),
                opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5),
                opgate.TensorSpec("b", ("N",)), opgate.Scalar("eps", 1e-5)],
        dims={"M": [1], "N": [7]}, dtypes=["float32"])
    case = Case.make({"M": 1, "N": 7}, 13, "constant_rows")
    truth, baseline = truth_and_baseline(op, case, "float32")
    cal = calibrate(op, "float32", [case], [truth], [baseline])
    budget = cal.budgets[0][0]
    assert budget.baseline_rmse < 1e-6 < budget.sensitivity_rmse
    # a conditioning-aware term sets it: the input sensitivity or the accumulation bound (which reads the same
    # conditioning off the Jacobian), never eager's lucky exactness
    assert budget.rmse_term in ("sensitivity", "accumulation"), budget.rmse_source
    x, w, b, eps = make_inputs(op, case, "float32").values
    mean = x.sum(-1, keepdim=True) / x.shape[-1]  # two-pass, as the Triton tutorial computes it
    var = ((x - mean) ** 2).sum(-1, keepdim=True) / x.shape[-1]
    two_pass = (x - mean) / torch.sqrt(var + eps) * w + b
    assert _judge(cal, 0, two_pass, [truth]).passed


def test_the_floor_scales_with_every_element_not_only_those_eager_kept():
    """fla's gated RMSNorm gradient in float16 (library corpus): eager overflows to NaN on most of dx, the elements
    it keeps are small, and a floor scaled by them was a tenth of what a correctly rounded dx errs by."""
    from opgate.verify.calibrate import _budget_for, baseline_lost_mask
    from opgate.verify.compare import compare_output

    gen = torch.Generator().manual_seed(0)
    truth = torch.cat([torch.randn(1000, generator=gen, dtype=torch.float64),
                       torch.randn(24, generator=gen, dtype=torch.float64) * 1e-2])
    eager = truth.to(torch.float16)
    eager[:1000] = float("nan")  # eager keeps only the small elements
    stats = compare_output(eager, truth, "float16", "out", baseline_lost=baseline_lost_mask(truth, eager))
    assert stats.truth_rms < 0.02 < 0.9 < stats.truth_rms_all
    budget = _budget_for(stats, "float16", 0.0, 0.0, 1, None, None)
    correctly_rounded = compare_output(truth.to(torch.float16), truth, "float16", "out")
    assert correctly_rounded.rmse <= budget.rmse
    assert budget.rmse >= FLOOR_EPS["float16"] * dt.eps("float16") * stats.truth_rms_all


def test_the_correctly_rounded_truth_passes_any_budget():
    from opgate.verify.calibrate import OutputBudget

    truth = torch.randn(256, dtype=torch.float64)
    starved = OutputBudget(rmse=1e-12, quantile=1e-12, scale=1.0, baseline_rmse=0.0, baseline_quantile=0.0)
    rounded = judge_case([truth.to(torch.float16)], [truth], [starved], ["float16"], [None])
    assert rounded.passed, rounded.reasons
    one_ulp_off = truth.to(torch.float16)
    one_ulp_off[0] = torch.nextafter(one_ulp_off[0], torch.tensor(10.0, dtype=torch.float16))
    assert not judge_case([one_ulp_off], [truth], [starved], ["float16"], [None]).passed


def test_bound_terms_past_the_deferral_time_are_left_to_the_numerics_and_come_out_the_same(monkeypatch) -> None:
    """Once an operator x dtype has spent its deferral time on bound terms, the cases a time budget would drop first
    get no budget in the plan (the numerics check computes it if it runs the case, with the plan's pooled figures);
    declared cases and the first case of each regime x layout always have one."""
    from opgate.verify import calibrate as calibrate_module
    from opgate.verify.calibrate import budgets_for_case

    op = opgate.Operator("softmax", reference=lambda x: torch.softmax(x, -1),
                         inputs=[opgate.TensorSpec("x", ("M", "N"))], dims={"M": [4], "N": [16, 33]})
    monkeypatch.setenv("OPGATE_CACHE", "0")
    cases, truths, baselines, full = _calibrated(op, "float16")  # nothing deferred by default
    deferred = calibrate_module.calibrate(op, "float16", cases, truths, baselines, defer_after_s=1e-9)
    monkeypatch.delenv("OPGATE_DEFER_BOUNDS_S", raising=False)
    assert calibrate_module.deferral_seconds(gpu=False) == calibrate_module.DEFER_BOUNDS_AFTER_S
    assert calibrate_module.deferral_seconds(gpu=True) == 0.0
    monkeypatch.setenv("OPGATE_DEFER_BOUNDS_S", "3")
    assert calibrate_module.deferral_seconds(gpu=True) == 3.0
    assert full.deferred_cases == 0 and all(full.budgets)
    kept = [k for k, row in enumerate(deferred.budgets) if row]
    assert 0 < deferred.deferred_cases == len(cases) - len(kept)
    assert all(deferred.budgets[k] for k, c in enumerate(cases) if c.origin == "declared")
    assert {(c.regime, c.layout) for c in cases} == {(cases[k].regime, cases[k].layout) for k in kept}
    assert "deferred to the numerics check" in " ".join(deferred.notes)
    # which cases were deferred depends on the clock; the pooled figures must not (a replay pools as its run did)
    other = calibrate_module.calibrate(op, "float16", cases, truths, baselines, defer_after_s=1e-6)
    assert other.deferred_cases and other.pooled_element_rho == deferred.pooled_element_rho
    assert calibrate_module.calibrate(op, "float16", cases, truths, baselines, defer_after_s=1e9).pooled_element_rho \
        == full.pooled_element_rho  # nothing deferred: pooled over every case, as before deferral existed
    k = next(k for k, row in enumerate(deferred.budgets) if not row)
    later, _, _ = budgets_for_case(op, "float16", cases[k], truths[k], baselines[k], deferred.pooled_rmse,
                                   deferred.pooled_quantile, deferred.n_cases, deferred.pooled_element_rho)
    assert [b.rmse for b in later] == pytest.approx([b.rmse for b in full.budgets[k]], rel=0.05)


def test_a_layout_case_holding_a_declared_cases_values_shares_its_bounds_and_votes_once(softmax_op, monkeypatch):
    """Its bound terms are the declared case's (computed once), and the pooled figures count those values once."""
    from opgate.verify import calibrate as calibrate_module

    monkeypatch.setenv("OPGATE_CACHE", "0")
    cases, truths, baselines, cal = _calibrated(softmax_op, "float16", "standard")
    pairs = [(k, j) for k, c in enumerate(cases) if c.origin == "layout"
             for j, d in enumerate(cases) if d.origin == "declared" and d.values_key() == c.values_key()][:1]
    assert pairs
    (k, j), = pairs
    assert [b.to_dict() for b in cal.budgets[k]] == [b.to_dict() for b in cal.budgets[j]]
    before = calibrate_module.CACHE_COUNTS["computed"]
    calibrate_module.bounds_until_deferred(softmax_op, cases, "float16", truths, 0.0)
    assert calibrate_module.CACHE_COUNTS["computed"] - before == len({c.values_key() for c in cases})


def test_the_lost_mask_of_an_all_finite_case_is_the_classifying_ones(monkeypatch):
    """baseline_lost_mask skips its masks when truth, rounded truth and eager are all finite; the mask is the same as
    the classifying path's, whether eager is fine or fails the case as a whole."""
    from opgate.verify import calibrate as calibrate_module

    gen = torch.Generator().manual_seed(3)
    truth = torch.randn(64, 33, dtype=torch.float64, generator=gen)
    pairs = [(truth, truth.half()), (truth, (truth * 0.3).half()), (truth, torch.zeros(64, 33)),
             (truth * 1e6, (truth * 1e6).half())]  # the last overflows float16: the classifying path either way
    for t, b in pairs:
        fast = baseline_lost_mask(t, b)
        monkeypatch.setattr(calibrate_module, "finite_everywhere", lambda *tensors: False)
        slow = baseline_lost_mask(t, b)
        monkeypatch.undo()
        assert torch.equal(fast, slow)


def test_the_perturbation_steps_are_uniform_in_plus_minus_scale_and_seeded() -> None:
    """Drawn in place on the CPU: the values of (rand * 2 - 1) * scale, the same for the same seed, None for
    inputs that are not float64 tensors."""
    from opgate.verify.calibrate import _perturbation_steps

    x = torch.zeros(3, 1000, dtype=torch.float64)
    steps = _perturbation_steps([x, 7, x.float()], 1e-7, seed=11)
    expected = (torch.rand(x.shape, generator=torch.Generator().manual_seed(11), dtype=torch.float64) * 2 - 1) * 1e-7
    assert torch.equal(steps[0], expected) and steps[1] is None and steps[2] is None
    assert float(steps[0].abs().max()) <= 1e-7 and torch.equal(_perturbation_steps([x], 1e-7, seed=11)[0], steps[0])


def test_a_declared_sizes_first_seed_is_never_deferred_and_its_later_seeds_rank_by_size() -> None:
    """The calibration defers in the order a time budget caps (verify/time_budget.py): a declared size's second seed
    is the same code path on other values, so it waits behind the smaller sizes opgate added."""
    from opgate.verify.calibrate import essential_cases
    from opgate.verify.inputs import declared_firsts

    op = opgate.Operator("softmax", reference=lambda x: torch.softmax(x, -1),
                         inputs=[opgate.TensorSpec("x", ("M", "N"))], dims={"M": [4], "N": [16, 33]})
    cases = plan_cases(op, "standard")
    declared = [k for k, c in enumerate(cases) if c.origin == "declared"]
    firsts = declared_firsts(cases)
    assert len(declared) == 4 and sorted(firsts) == declared[:2]  # N=16 and N=33, seed 0 each
    order, essential = essential_cases(cases)
    assert firsts <= essential and not (set(declared) - firsts) & essential
    assert order[:2] == declared[:2]
    second_of_33 = declared[3]
    smaller_added = [k for k in order if k not in essential and math.prod(v for _, v in cases[k].dims) < 4 * 33]
    assert smaller_added and all(order.index(k) < order.index(second_of_33) for k in smaller_added)


def test_a_size_opgate_added_that_the_reference_refuses_is_left_out_and_said_a_declared_one_is_bad_input(tmp_path):
    """attorch's BatchNorm1d: F.batch_norm in training mode raises on the B=1, L=1 edge case opgate adds; that one
    case stopped a 17-operator run with exit 2. Now it is left out of the plan and the calibration result says so;
    a size the spec declared that the reference refuses is still the user's error."""
    from opgate.verify.calibrator import REFERENCE_REFUSED_KEY, calibrate_plan, calibration_result

    def needs_two(x):
        if x.shape[0] < 2:
            raise ValueError("Expected more than 1 value per channel when training")
        return x - x.mean(0)

    op = opgate.Operator("needs_two", reference=needs_two, inputs=[opgate.TensorSpec("x", ("B", "C"))],
                         dims={"B": [16, 3], "C": [8]}, dtypes=["float32"])
    cases = plan_cases(op, "quick")
    assert any(dict(c.dims)["B"] == 1 for c in cases)  # opgate adds B=1
    outcome = calibrate_plan(op, "float32", cases, lambda: [], "quick", 0, tmp_path / "plan.pt")
    said = outcome.summary()[REFERENCE_REFUSED_KEY]
    assert said["cases"] >= 1 and "Expected more than 1 value per channel" in said["first"]
    assert outcome.n_cases <= len(cases) - said["cases"]  # (an empty case B=0 is dropped apart, as before)
    result = calibration_result(op, {"float32": outcome}, "quick", 0, 1.0)
    assert result.outcome.value == "passed" and "left out because the reference raised on them" in result.reason
    declared = opgate.Operator("needs_two", reference=needs_two, inputs=[opgate.TensorSpec("x", ("B", "C"))],
                               dims={"B": [1], "C": [8]}, dtypes=["float32"])
    with pytest.raises(CalibrationError, match="raised ValueError on B=1"):
        calibrate_plan(declared, "float32", plan_cases(declared, "quick"), lambda: [], "quick", 0, tmp_path / "d.pt")
