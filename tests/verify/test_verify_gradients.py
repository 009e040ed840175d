"""Gradients: `<op>.grad` twins of operators with requires_grad inputs, judged like any operator.

In-process tests build small operators from torch functions; the end-to-end tests run `opgate verify` on
tests/data/verify/gradients_spec.py, whose backward kernels are real Triton kernels (the interpreter on CPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from opgate.verify.calibrate import truth_and_baseline
from opgate.verify.gradients import (
    GRAD_SUFFIX, NO_BACKWARD, GradientError, gradient_operator, is_gradient_operator, upstream_gradient,
    with_gradient_operators,
)
from opgate.verify.inputs import Case, make_inputs
from opgate.core.spec import Operator, Scalar, SpecError, TensorSpec
from tests_verify_support import DATA, ROOT, SRC

SPEC = DATA / "gradients_spec.py"


def softmax_op(**kwargs) -> Operator:
    op = Operator("softmax", reference=lambda x: torch.softmax(x, dim=-1),
                  inputs=[TensorSpec("x", ("M", "N"), requires_grad=True)], dims={"M": [3], "N": [8]},
                  dtypes=kwargs.pop("dtypes", ["float32", "bfloat16"]), **kwargs)
    op.implementation("torch")(lambda x: torch.softmax(x, dim=-1))
    return op


def test_an_operator_with_requires_grad_inputs_gets_a_grad_twin_with_every_implementation():
    op = softmax_op(dtypes=["float32", "float8_e4m3fn"])
    plain = Operator("plain", reference=torch.relu, inputs=[TensorSpec("x", ("N",))], dims={"N": [4]})
    ops = with_gradient_operators([op, plain])
    assert [o.name for o in ops] == ["softmax", "plain", "softmax" + GRAD_SUFFIX]
    twin = ops[-1]
    assert is_gradient_operator(twin) and twin.forward is op
    assert list(twin.implementations) == ["torch"] and twin.implementations["torch"].backend == "torch"
    assert twin.dtypes == ["float32"]  # no autograd in float8
    assert [o.name for o in with_gradient_operators(ops)] == [o.name for o in ops]  # idempotent


def test_the_twin_keeps_torch_compile_of_the_reference_and_drops_exports_without_autograd():
    from opgate.verify.backends.base import implementation_choices

    op = softmax_op()
    op.implementation("exported", backend="onnxruntime")(lambda x: torch.softmax(x, dim=-1))
    twin = gradient_operator(op)
    assert [(c.name, c.origin) for c in implementation_choices(twin)] == [("torch", "user"),
                                                                         ("torch.compile", "reference")]
    assert "onnxruntime" in [c.backend for c in implementation_choices(op)]


def test_requires_grad_on_an_integer_input_is_a_spec_error():
    op = Operator("gather", reference=lambda x, i: x.gather(-1, i),
                  inputs=[TensorSpec("x", ("M", "N")), TensorSpec("i", ("M", "N"), dtype="int64", kind="index",
                                                               high="N", requires_grad=True)],
                  dims={"M": [2], "N": [4]})
    with pytest.raises(SpecError, match="only float inputs have gradients"):
        gradient_operator(op)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_upstream_gradients_are_the_same_values_in_every_dtype(dtype):
    wide = upstream_gradient("op", [(5, 7)], 0, torch.empty(5, 7, dtype=torch.float64))
    narrow = upstream_gradient("op", [(5, 7)], 0, torch.empty(5, 7, dtype=dtype))
    assert torch.equal(narrow.to(torch.float64), wide)
    assert wide.std() > 0.5 and not torch.equal(wide, upstream_gradient("op", [(5, 7)], 1, wide))


def test_a_kept_upstream_gradient_is_the_fresh_draw_and_a_caller_cannot_change_it(monkeypatch):
    from opgate.verify import gradients

    output = torch.empty(6, 9, dtype=torch.float64)
    first = upstream_gradient("kept", [(6, 9)], 0, output)
    first.fill_(7.0)  # a caller writing into what it was given
    kept = upstream_gradient("kept", [(6, 9)], 0, output)
    monkeypatch.setattr(gradients, "_DRAWN", type(gradients._DRAWN)())  # nothing kept: drawn again
    fresh = upstream_gradient("kept", [(6, 9)], 0, output)
    assert torch.equal(kept, fresh) and not torch.equal(kept, first)
    for k in range(gradients.DRAWN_KEPT + 2):  # older draws leave room for newer ones
        upstream_gradient("kept", [(6, 9)], k + 1, output)
    assert len(gradients._DRAWN) == gradients.DRAWN_KEPT


def test_while_timing_an_upstream_gradient_is_drawn_once_on_the_device_and_handed_out_as_it_is():
    """The runtime stage times a twin's calls: no host draw, copy or clone inside them (a copy to the GPU there
    was timed instead of the kernels and made every twin uncapturable); outside, every call gets its own copy."""
    from opgate.verify.gradients import UPSTREAM_FLUSH, upstream_kept_on_device

    output = torch.empty(64, 33, dtype=torch.float16)
    with upstream_kept_on_device():
        first = upstream_gradient("timed", [(64, 33)], 0, output)
        again = upstream_gradient("timed", [(64, 33)], 0, output)
        other = upstream_gradient("timed", [(64, 33)], 1, output)
    assert again is first and other is not first and first.dtype == torch.float16
    assert torch.equal(first.to(torch.bfloat16).to(torch.float16), first)  # bfloat16-exact, as on the host
    assert not bool(((first != 0) & (first.abs() < UPSTREAM_FLUSH)).any()) and first.float().std() > 0.5
    after = upstream_gradient("timed", [(64, 33)], 0, output)
    assert after is not upstream_gradient("timed", [(64, 33)], 0, output)  # a fresh copy per call again


def test_a_twins_work_is_counted_on_meta_tensors_without_drawing_an_upstream_gradient(monkeypatch):
    """The runtime stage counts a twin's bytes at its timing size while it holds the GPU alone: drawing a host
    upstream gradient for meta outputs cost 6-10 s of every twin's exclusive check on the H200 (180 M elements)."""
    from opgate.core.work import operator_work
    from opgate.verify import gradients

    monkeypatch.setattr(gradients, "_drawn_upstream", lambda *a: pytest.fail("drew an upstream gradient on the host"))
    twin = gradient_operator(softmax_op())
    work = operator_work(twin, "float32", {"M": 16384, "N": 11008})
    assert "meta" in work.flops_source and work.bytes == 2 * 4 * 16384 * 11008  # x read, dx written


def test_the_grad_reference_is_autograd_of_the_reference_in_float64():
    twin = gradient_operator(softmax_op())
    case = Case.make({"M": 3, "N": 8}, seed=4)
    truth, baseline = truth_and_baseline(twin, case, "bfloat16")  # runs under no_grad, as the calibration does
    x = make_inputs(twin, case, "bfloat16").truth[0].clone().requires_grad_(True)
    y = torch.softmax(x, dim=-1)
    (expected,) = torch.autograd.grad(y, x, upstream_gradient("softmax", [(3, 8)], 0, y))
    assert truth[0].dtype == torch.float64 and torch.equal(truth[0], expected)
    assert baseline[0].dtype == torch.bfloat16 and (baseline[0].double() - expected).abs().max() < 0.05


def test_an_implementation_without_backward_or_with_a_none_gradient_fails_clearly():
    op = Operator("mul", reference=lambda x, w: x * w,
                  inputs=[TensorSpec("x", ("N",), requires_grad=True), TensorSpec("w", ("N",), requires_grad=True)],
                  dims={"N": [6]})

    class HalfBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x * w

        @staticmethod
        def backward(ctx, dy):
            x, w = ctx.saved_tensors
            return dy * w, None  # forgets dw

    op.implementation("no_backward", backend="torch")(lambda x, w: (x * w).detach())
    op.implementation("half", backend="torch")(HalfBackward.apply)
    twin = gradient_operator(op)
    args = make_inputs(twin, Case.make({"N": 6}, seed=1), "float32").values
    with torch.no_grad(), pytest.raises(GradientError, match=NO_BACKWARD):
        twin.implementations["no_backward"].fn(*args)
    with torch.no_grad(), pytest.raises(GradientError, match="gradient w.r.t. input 'w' is None"):
        twin.implementations["half"].fn(*args)


def test_the_implementation_sees_the_case_layout_and_its_gradients_keep_the_inputs_shape():
    seen = []

    def impl(x, eps):
        seen.append((x.is_contiguous(), x.requires_grad))
        return x * eps

    op = Operator("scale", reference=lambda x, eps: x * eps,
                  inputs=[TensorSpec("x", ("M", "N"), requires_grad=True), Scalar("eps", 3.0)],
                  dims={"M": [4], "N": [5]})
    op.implementation("torch")(impl)
    twin = gradient_operator(op)
    generated = make_inputs(twin, Case.make({"M": 4, "N": 5}, seed=2, layout="strided"), "float32")
    (grad,) = twin.implementations["torch"].fn(*generated.laid_out)
    assert seen == [(False, True)]
    assert grad.shape == (4, 5) and torch.equal(grad, 3.0 * upstream_gradient("scale", [(4, 5)], 0, grad))


# -- end to end ----------------------------------------------------------------------------------------------------

IMPLS = ("torch_composed", "triton", "triton_grad_no_onehot", "triton_grad_scaled", "triton_no_backward",
         "triton_dw_bug")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, "-m", "opgate", "verify", *args, "--stages", "numerics"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def gradient_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("verify-grad")
    # float32 only: every assertion reads it, and a wrong backward is wrong in every dtype (the other two cost 30 s)
    args = [str(SPEC), "--budget", "quick", "--no-extras", "--op", "cross_entropy.grad", "--op", "layer_norm.grad",
            "--dtype", "float32"]
    for impl in IMPLS:
        args += ["--impl", impl]
    proc = run_cli(*args, "--json", str(out / "report.json"), "--out", str(out / "art"))
    results = {r["check_id"]: r for r in json.loads((out / "report.json").read_text())["results"]}
    return proc, results


@pytest.mark.slow
def test_correct_backwards_pass_and_every_wrong_backward_fails_as_a_gradient(gradient_run):
    proc, results = gradient_run
    assert proc.returncode == 1, proc.stderr[-3000:]
    for check in ("cross_entropy.grad.triton", "cross_entropy.grad.torch_composed", "layer_norm.grad.triton",
                  "layer_norm.grad.torch_composed"):
        result = results[f"verify.{check}.float32"]
        assert result["outcome"] == "passed", (check, result["reason"])
    for check in ("cross_entropy.grad.triton_grad_no_onehot", "cross_entropy.grad.triton_grad_scaled",
                  "cross_entropy.grad.triton_no_backward", "layer_norm.grad.triton_dw_bug"):
        result = results[f"verify.{check}.float32"]
        assert result["outcome"] == "failed", (check, result["reason"])
        assert result["extra"]["failure_class"] == "gradient"
        assert result["extra"]["replay"].startswith("ogv1.")
    assert NO_BACKWARD in results["verify.cross_entropy.grad.triton_no_backward.float32"]["reason"]
    assert "torch.autograd.Function" in results["verify.cross_entropy.grad.triton_no_backward.float32"]["remediation"]
    # the dw bug is in the second gradient (w) only
    dw = results["verify.layer_norm.grad.triton_dw_bug.float32"]["extra"]
    assert all(r.startswith("out1:") for r in dw["smallest_failing_reasons"]), dw["smallest_failing_reasons"]
    # the scaled gradient is right at one row only: the shrunk case keeps M > 1
    assert results["verify.cross_entropy.grad.triton_grad_scaled.float32"]["extra"]["smallest_failing"]["dims"]["M"] > 1


@pytest.mark.slow
def test_a_gradient_failure_replays_from_its_token(gradient_run, tmp_path):
    _, results = gradient_run
    token = results["verify.layer_norm.grad.triton_dw_bug.float32"]["extra"]["replay"]
    proc = run_cli(str(SPEC), "--replay", token, "--json", str(tmp_path / "replay.json"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    replayed = {r["check_id"]: r for r in json.loads((tmp_path / "replay.json").read_text())["results"]}
    result = replayed["verify.layer_norm.grad.triton_dw_bug.float32"]
    assert result["outcome"] == "failed" and result["extra"]["failure_class"] == "gradient"
    assert result["extra"]["cases"][0]["case"] == results["verify.layer_norm.grad.triton_dw_bug.float32"][
        "extra"]["smallest_failing_label"]


def test_the_runtime_warm_up_leaves_its_work_count_for_the_measurement(tmp_path, monkeypatch):
    """core/work.operator_work_stored: counted once (the warm-up, side by side), read by the exclusive measurement;
    another size or a torn file is counted again."""
    from opgate.core import work as work_module

    path = tmp_path / "counts" / "softmax.float32.json"
    op = softmax_op()
    counted = work_module.operator_work_stored(op, "float32", {"M": 64, "N": 32}, path)
    monkeypatch.setattr(work_module, "operator_work", lambda *a: pytest.fail("counted again"))
    assert work_module.operator_work_stored(op, "float32", {"M": 64, "N": 32}, path) == counted
    monkeypatch.undo()
    other = work_module.operator_work_stored(op, "float32", {"M": 128, "N": 32}, path)
    assert other.bytes == 2 * counted.bytes
    path.write_text("{torn")
    assert work_module.operator_work_stored(op, "float32", {"M": 64, "N": 32}, path) == counted
