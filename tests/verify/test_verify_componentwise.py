"""The componentwise check (calibrate.element_allowances) and the failure classes by error size (deviations.py).

The pooled RMSE/p99.9 budgets scale with a case's largest values; a few small elements can lose every digit unseen.
Each case also judges its sampled elements (random, largest and smallest |truth|) one by one. These tests run the
judge on real cases of the plan, with real implementations (torch on the CPU), no verify process: a few seconds.
"""

from __future__ import annotations

import math

import pytest

import torch
import torch.nn.functional as F

import opgate
from opgate.verify.calibrate import budgets_for_case, judge_case, truth_and_baseline
from opgate.verify.compare import OutputStats
from opgate.verify.deviations import classify_failure
from opgate.verify.inputs import Case, plan_cases, make_inputs


def _verdict(op: opgate.Operator, case: Case, dtype: str, implementation) -> tuple[bool, tuple[str, ...]]:
    truth, baseline = truth_and_baseline(op, case, dtype)
    budgets, masks, out_dtypes = budgets_for_case(op, dtype, case, truth, baseline, [0.0], [0.0], 32)
    generated = make_inputs(op, case, dtype)
    verdict = judge_case([implementation(*generated.values)], truth, budgets, out_dtypes, masks)
    return verdict.passed, verdict.reasons


SUFFIX = opgate.Operator("suffix_sum", reference=lambda x: x.flip(-1).cumsum(-1).flip(-1),
                         inputs=[opgate.TensorSpec("x", ("M", "N"))], dims={"M": [4], "N": [256]})


def _suffix_sequential(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    carry = torch.zeros(x.shape[0], dtype=torch.float32)
    for j in range(x.shape[1] - 1, -1, -1):  # float32 all the way, as a one-pass kernel keeps its carry
        carry = carry + x[:, j]
        out[:, j] = carry
    return out


def _suffix_total_minus_prefix(x: torch.Tensor) -> torch.Tensor:
    inclusive = _suffix_sequential(x.flip(-1)).flip(-1)  # a float32 prefix scan, as a one-pass kernel computes it
    total = x.sum(-1, keepdim=True)  # the row total from a separate reduction
    return total - inclusive + x  # the last elements carry the scan's error of the whole row, not of their size


def test_total_minus_prefix_fails_componentwise_where_the_rmse_passes():
    # typical inputs: the last elements of a row are small suffix sums, total - prefix errs by an ulp of the total
    case = plan_cases(SUFFIX, "quick")[0]
    passed, reasons = _verdict(SUFFIX, case, "float32", _suffix_total_minus_prefix)
    assert not passed
    assert any("componentwise" in r for r in reasons)
    assert not any(r.startswith("RMSE") for r in reasons)  # the pooled budget alone would pass it
    assert _verdict(SUFFIX, case, "float32", _suffix_sequential) == (True, ())


CE = opgate.Operator(
    "cross_entropy",
    reference=lambda logits, labels: F.cross_entropy(logits, labels, reduction="none"),
    inputs=[opgate.TensorSpec("logits", ("M", "V"), kind="logits"),
            opgate.TensorSpec("labels", ("M",), dtype="int64", kind="index", high="V", hits="logits")],
    dims={"M": [8], "V": [128]}, dtypes=["float16"])


def _ce_float32_lse(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    lse = torch.logsumexp(logits.float(), dim=-1)  # Liger style: loss = lse - x[label] in float32
    return (lse - logits.float().gather(-1, labels[:, None])[:, 0]).to(logits.dtype)


def _ce_float16_lse(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    lse = torch.logsumexp(logits.float(), dim=-1).to(logits.dtype)  # saved in the I/O dtype: every digit of 1e-3 lost
    return (lse.float() - logits.float().gather(-1, labels[:, None])[:, 0]).to(logits.dtype)


def test_confident_hit_rows_catch_a_float16_logsumexp():
    case = next(c for c in plan_cases(CE, "quick") if c.regime == "peaked" and dict(c.dims)["M"] == 8)
    generated = make_inputs(CE, case, "float16")
    truth = F.cross_entropy(generated.truth[0], generated.truth[1], reduction="none")
    assert float(truth[1]) < 2e-3 and float(truth[2]) > 1.0  # row 1: moderate and hit; row 2: a miss
    passed, reasons = _verdict(CE, case, "float16", _ce_float16_lse)
    assert not passed and any("componentwise" in r for r in reasons)
    assert _verdict(CE, case, "float16", _ce_float32_lse) == (True, ())


def _stats(numel: int = 64, rmse: float = 0.0, truth_rms: float = 1.0, exact_mismatches: int = 0,
           nonfinite_unexpected: int = 0) -> OutputStats:
    return OutputStats("out", numel, compared=numel, truth_rms=truth_rms, rmse=rmse,
                       exact_mismatches=exact_mismatches, nonfinite_unexpected=nonfinite_unexpected)


DECLARED = {"M": [4], "N": [256]}


def _case(regime: str = "typical", n: int = 256, layout: str = "contiguous") -> Case:
    return Case.make({"M": 4, "N": n}, 0, regime, layout)


def test_failure_class_by_the_size_of_the_error():
    small = "RMSE 2e-06 > budget 1e-06"
    large = "RMSE 0.5 > budget 1e-06"
    # a confident row or a 1e8-row failing far above its budget, yet far inside the output's scale: precision
    element = "1/20 sampled element(s) beyond their own bound; worst at flat index 3: error 8 > budget 1e-05"
    assert classify_failure([(_case("mixed"), (element,), (_stats(rmse=1.0, truth_rms=3e7),))], DECLARED) == "precision"
    # an overflow at large inputs: range
    assert classify_failure([(_case("large"), ("3 NaN/Inf where the truth is finite",),
                              (_stats(nonfinite_unexpected=3),))], DECLARED) == "range"
    # a wrong value at large inputs only: range, as before
    assert classify_failure([(_case("large"), (large,), (_stats(rmse=0.5),))], DECLARED) == "range"
    # typical inputs: a rounding error is precision, a wrong formula typical
    assert classify_failure([(_case(), (small,), (_stats(rmse=2e-6),))], DECLARED) == "precision"
    assert classify_failure([(_case(), (large,), (_stats(rmse=0.5),))], DECLARED) == "typical"
    # a quantizer that is off by one quantum on half of its elements: a wrong rounding rule, not precision
    quantized = (_stats(rmse=0.014, truth_rms=1.0, exact_mismatches=32),)
    assert classify_failure([(_case(), ("RMSE 0.014 > budget 0.000632",), quantized)], DECLARED) == "typical"


def test_nonfinite_class_only_when_nothing_else_fails():
    nan_only = (_case("nonfinite"), ("1 element(s) where the truth is NaN/Inf (or overflows float16) and the result "
                                     "is not",), (_stats(),))
    assert classify_failure([nan_only], DECLARED) == "nonfinite"
    masked_value = (_case("masked"), ("RMSE 0.000996 > budget 0.000551",), (_stats(rmse=1e-3, truth_rms=0.45),))
    assert classify_failure([nan_only, masked_value], DECLARED) == "precision"


def test_opgate_sizes_only_tail_unless_a_long_row_rounds():
    tail = (_case(n=17), ("RMSE 0.3 > budget 1e-06",), (_stats(rmse=0.3),))
    assert classify_failure([tail], DECLARED) == "tail"
    # float16 atomics of a split row sum: off at 1000 and 1023 columns only, 1.0-1.2x the budget (blind corpus)
    long_rows = [(_case(n=n), ("RMSE 0.00932 > budget 0.009",), (_stats(rmse=0.00932, truth_rms=17.0),))
                 for n in (1000, 1023)]
    assert classify_failure(long_rows, DECLARED) == "precision"
    dropped_element = (_case(n=16385), ("RMSE 1 > budget 0.0001",), (_stats(rmse=1.0, truth_rms=128.0),))
    assert classify_failure([dropped_element], DECLARED) == "tail"  # 10^4 x its budget: not a rounding error


def test_every_sampled_element_allowance_is_finite_and_positive():
    case = plan_cases(SUFFIX, "quick")[0]
    truth, baseline = truth_and_baseline(SUFFIX, case, "float32")
    budgets, _, _ = budgets_for_case(SUFFIX, "float32", case, truth, baseline, [0.0], [0.0], 32)
    assert len(budgets[0].elements) >= 16
    assert all(math.isfinite(a) and a > 0 for _, a in budgets[0].elements)


def test_an_all_zero_log_space_output_allows_a_fast_log():
    # log_softmax of one column is 0 everywhere; a fast-math log2 returns 1e-8 for log 1 (GPU run of the blind
    # corpus' good_log_softmax_triton): theta absolute, not theta x |y| = 0
    op = opgate.Operator("log_softmax", reference=lambda x: torch.log_softmax(x, -1),
                         inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")], dims={"M": [1], "N": [1]})
    case = Case.make({"M": 1, "N": 1}, 7)
    passed, reasons = _verdict(op, case, "float32", lambda x: torch.full_like(x, 1.08e-8))
    assert passed, reasons
    assert not _verdict(op, case, "float32", lambda x: torch.full_like(x, 1e-3))[0]


# -- the intermediates' rounding and pooled eager loss (issue #26's false alarms) ---------------------------------

SOFTCAP = 30.0
Z = 1e-4


def _capped(x: torch.Tensor) -> torch.Tensor:
    return SOFTCAP * torch.tanh(x / SOFTCAP)


def _z_loss_reference(x: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    logits = _capped(x)
    lse = torch.logsumexp(logits, dim=-1)
    return lse - logits.gather(-1, label[:, None]).squeeze(-1) + Z * lse * lse


def _z_loss_kernel(x: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """float32 throughout, the capping computed once per path as a fused kernel does (x / c in the lse path,
    x * (1 / c) at the label): lse - x_label is then not 0 at V = 1, by about an ulp of |x|."""
    x = x.float()
    capped_lse_path = SOFTCAP * torch.tanh(x / SOFTCAP)
    m = capped_lse_path.amax(-1, keepdim=True)
    lse = (m + torch.log(torch.exp(capped_lse_path - m).sum(-1, keepdim=True))).squeeze(-1)
    at_label = torch.tanh(x.gather(-1, label[:, None]).squeeze(-1) * (1.0 / SOFTCAP)) * SOFTCAP
    return lse - at_label + Z * lse * lse


Z_LOSS = opgate.Operator(
    "z_loss", reference=_z_loss_reference,
    inputs=[opgate.TensorSpec("x", ("M", "V"), kind="logits"), opgate.TensorSpec("label", ("M",), dtype="int64",
                                                                                   kind="index", high="V")],
    dims={"M": [8], "V": [1, 64]})


def test_an_exact_cancellation_at_one_class_admits_the_rounding_of_its_intermediates():
    # V = 1: the loss is z lse^2 after lse - x_label cancels exactly in eager; a float32 kernel that rounds lse and
    # x_label apart is off by ~u|x|, many times eager's error, and right (issue #26)
    case = Case.make({"M": 8, "V": 1}, 5, origin="edge")
    passed, reasons = _verdict(Z_LOSS, case, "float32", _z_loss_kernel)
    assert passed, reasons
    # a float16 logsumexp is still far beyond that rounding
    def lse_in_half(x, label):
        logits = _capped(x.float())
        lse = torch.logsumexp(logits.half(), dim=-1).float()
        return lse - logits.gather(-1, label[:, None]).squeeze(-1) + Z * lse * lse

    wider = Case.make({"M": 8, "V": 64}, 6, origin="declared")
    assert not _verdict(Z_LOSS, wider, "float32", lse_in_half)[0]


def test_a_nan_truth_at_a_size_opgate_added_is_undefined_not_a_failure():
    from opgate.verify.deviations import undefined_masks

    batch_mean = opgate.Operator("batch_mean", reference=lambda x: x.sum(-1).mean(),
                                 inputs=[opgate.TensorSpec("x", ("M", "N"))], dims={"M": [4], "N": [8]})

    def zero_when_empty(x):
        return x.sum(-1).mean() if x.shape[0] else torch.zeros((), dtype=x.dtype)

    for origin, judged in (("edge", False), ("declared", True)):
        case = Case.make({"M": 0, "N": 8}, 1, origin=origin)
        truth, baseline = truth_and_baseline(batch_mean, case, "float32")
        assert bool(truth[0].isnan())  # the mean of nothing
        budgets, masks, out_dtypes = budgets_for_case(batch_mean, "float32", case, truth, baseline, [0.0], [0.0], 8)
        generated = make_inputs(batch_mean, case, "float32")
        verdict = judge_case([zero_when_empty(*generated.values)], truth, budgets, out_dtypes, masks,
                             undefined=undefined_masks(batch_mean, case, "float32", out_dtypes, truth))
        assert verdict.passed is not judged, verdict.reasons  # a user who declares M = 0 asked for it


def test_a_case_where_eager_is_exact_gets_the_eager_loss_pooled_over_the_plan():
    from opgate.verify.calibrate import element_allowances
    from opgate.verify.error_bounds import AccumulationBound, LogspaceBound, SampledElement

    truth = torch.tensor([0.043, 3.0], dtype=torch.float64)
    exact = truth.to(torch.bfloat16)  # eager rounds once: no loss beyond its output rounding
    accumulation = AccumulationBound(1e-7, 1e-7, 2, 2.0**-24, (SampledElement(0, 1e-8, 6.0),))
    alone = element_allowances(truth, exact, accumulation, LogspaceBound())
    pooled = element_allowances(truth, exact, accumulation, LogspaceBound(), pooled_rho=5e-4)
    assert pooled[0][1] - alone[0][1] > 8 * 5e-4 * 6.0 * 0.99  # K_ELEMENT x rho x (|y| + m)


def test_a_wider_float_output_is_judged_by_its_values_and_said():
    """fla documents float32 losses for float16 logits: the values are judged (rounded to the reference's dtype), not
    failed on the dtype alone; a narrower or integer output still fails on its dtype."""
    from opgate.verify.compare import compare_output

    truth = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64) / 3
    wider = compare_output(truth.float(), truth, "float16")
    assert wider.problem == "" and wider.wider_dtype == "float32" and wider.max_abs < 1e-3
    narrower = compare_output(truth.half(), truth, "float32")
    assert "dtype float16 != the reference's float32" in narrower.problem


def test_a_cross_entropy_written_as_one_call_admits_its_logsumexp_rounding_at_one_class():
    # the library corpus's spec of fla's soft-capped z-loss cross-entropy, as a user writes it: F.cross_entropy has
    # no lse intermediate of its own, and at V = 1 its value is 0; the kernel's lse - z_label is not (H200 run)
    def reference(x, label):
        logits = _capped(x)
        return (torch.nn.functional.cross_entropy(logits, label, reduction="none")
                + Z * torch.logsumexp(logits, dim=-1) ** 2)

    op = opgate.Operator("z_loss_ce", reference=reference, inputs=Z_LOSS.inputs, dims={"M": [8], "V": [1, 64]})
    case = Case.make({"M": 8, "V": 1}, 5, origin="edge")
    passed, reasons = _verdict(op, case, "float32", _z_loss_kernel)
    assert passed, reasons
    assert not _verdict(op, case, "float32", lambda x, label: _z_loss_kernel(x, label) + 1e-4)[0]


# -- a norm's mean, rounded in float32, on a constant row (held-out corpus: mamba-ssm's layer_norm_linear_fn) --------

EPS = 1e-5
NORM_LINEAR = opgate.Operator(
    "layer_norm_linear",
    reference=lambda x, w, b, W: F.linear(F.layer_norm(x, (x.shape[-1],), w, b, EPS), W),
    inputs=[opgate.TensorSpec("x", ("M", "N")), opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5),
            opgate.TensorSpec("b", ("N",)), opgate.TensorSpec("W", ("O", "N"), kind="uniform", low=-0.05, high=0.05)],
    dims={"M": [4], "N": [7], "O": [16]})


def _textbook_layer_norm_linear(mean_dtype: torch.dtype):
    """A float32 layer norm whose mean and variance are sums left to right in `mean_dtype` (float32: as a kernel
    that is right does it), then F.linear."""
    def implementation(x, w, b, W):
        mean = torch.zeros(x.shape[0], 1, dtype=mean_dtype)
        for j in range(x.shape[1]):
            mean = mean + x[:, j:j + 1].to(mean_dtype)
        mean = (mean / x.shape[1]).float()
        centred = x - mean
        var = (centred * centred).sum(-1, keepdim=True) / x.shape[1]
        return F.linear(centred * torch.rsqrt(var + EPS) * w + b, W)
    return implementation


def test_a_float32_mean_on_a_constant_row_before_a_linear_layer_passes_and_a_half_one_fails():
    # constant rows (every input's rows are: W's too, so the linear layer sums equal terms) leave x - mean all
    # rounding of the mean, times 1/sqrt(eps); the inputs' Jacobian sends a uniform shift to 0 and charged nothing,
    # and a textbook float32 layer norm failed half such cases (mamba-ssm's layer_norm_linear_fn at 1.8x its budget)
    cases = [Case.make({"M": 4, "N": 7, "O": 16}, seed, regime="constant_rows") for seed in range(50, 62)]
    right, half = _textbook_layer_norm_linear(torch.float32), _textbook_layer_norm_linear(torch.float16)
    for case in cases:
        passed, reasons = _verdict(NORM_LINEAR, case, "float32", right)
        assert passed, (case.label(), reasons)
    assert sum(not _verdict(NORM_LINEAR, case, "float32", half)[0] for case in cases) >= len(cases) // 2


def test_a_norm_keeps_its_output_and_jacobian_with_its_mean_made_a_node():
    from opgate.verify.error_bounds import _recording_intermediates

    x = torch.randn(3, 2, 8, 5, dtype=torch.float64, requires_grad=True)
    w, b, w2 = torch.rand(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64), torch.rand(8, 5).double()
    for call in (lambda v: F.layer_norm(v, (8, 5), w2),
                 lambda v: F.group_norm(v.reshape(6, 8, 5), 4, w, b)):
        recorder = _recording_intermediates()
        with recorder:
            out = call(x)
        plain = call(x)
        assert torch.equal(out, plain)
        mean = recorder.tensors[0]
        assert mean.shape[-1] == 1 and recorder.magnitude_of(mean).shape == mean.shape
        probe = torch.randn_like(out)
        assert torch.equal(torch.autograd.grad(out, x, probe, retain_graph=True)[0],
                           torch.autograd.grad(plain, x, probe)[0])
        assert torch.autograd.grad(out, mean, probe)[0].abs().sum() > 0


@pytest.mark.slow
def test_llamas_own_rms_norm_formula_passes_in_half_precision_against_a_fused_reference(tmp_path):
    """transformers' LlamaRMSNorm returns weight * x_hat.to(dtype); its eager gradient multiplies by that rounded
    x_hat in the dtype. A fused F.rms_norm reference rounds neither, and the formula's gradients failed (float16
    4.5x in 6/58 cases, bfloat16 4.9x in 35/58) before each half-precision term could be formed once in the dtype
    (calibrate.FORMED_IN_DTYPE)."""
    import json
    import os
    import subprocess
    import sys

    from tests_verify_support import DATA, ROOT, SRC

    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "opgate", "verify", str(DATA / "llama_rms_norm_spec.py"),
                           "--stages", "numerics", "--json", str(report)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=600)
    results = {r["check_id"]: r for r in json.loads(report.read_text())["results"]}
    for dtype in ("float16", "bfloat16"):
        for op in ("rms_norm", "rms_norm.grad"):
            result = results[f"verify.{op}.llama_rms_norm_formula.{dtype}"]
            assert result["outcome"] == "passed", (op, dtype, result["reason"][:600])
    assert proc.returncode == 0, proc.stdout[-2000:]


def test_the_dtype_formed_allowance_is_for_a_norm_alone():
    """Allowed for every reference it hid the truth corpus's float16-accumulator matmul, low-precision-lse
    cross-entropy and float16 split-row atomics: only a reference that is a layer, group or RMS norm alone (and its
    gradient) gets it."""
    from opgate.verify.error_bounds import accumulation_bounds
    from opgate.verify.gradients import gradient_function

    x = torch.randn(4, 8, dtype=torch.float64)
    w = torch.rand(8, dtype=torch.float64) + 0.5

    def rms(x, w):
        return F.rms_norm(x, (8,), w, 1e-6)

    def rms_then_scale(x, w):
        return F.rms_norm(x, (8,), w, 1e-6) * 2.5 + x

    def matmul(x, w):
        return x @ w

    def formed(reference, *args):
        truths = reference(*args)
        truths = list(truths) if isinstance(truths, (tuple, list)) else [truths]
        return [b.formed_in_dtype for b in accumulation_bounds(reference, list(args), truths, "float16", 0)]

    assert formed(rms, x, w) == [True]
    assert formed(matmul, x, w) == [False]
    assert formed(rms_then_scale, x, w) == [False]
    op = opgate.Operator("rms", reference=rms, inputs=[opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
                                                       opgate.TensorSpec("w", ("N",), requires_grad=True)],
                         dims={"M": [4], "N": [8]})
    assert formed(gradient_function(rms, op, [0, 1], strict=False), x, w) == [True, True]
