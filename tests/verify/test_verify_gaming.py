"""Gaming probes: cached results, aliased outputs, mutated inputs, work on an unsynchronised side stream.

The probes run on real implementations (tests/data/verify/gaming_spec.py end to end; small torch functions
in process); the side-stream probe needs a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from opgate.model.results import CheckResult, Outcome
from opgate.verify.gaming import (
    GamingFinding, GamingProbe, aliasing_pairs, apply_probe, probe_alias, probe_cached, probe_mutation,
    probe_side_stream, same_bits,
)
from tests_verify_support import DATA, ROOT, SRC

SPEC = DATA / "gaming_spec.py"


def values(seed: int, n: int = 32) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


def judge_against(truths):
    def judge(outputs, which):
        return torch.allclose(outputs[0], truths[which], rtol=1e-6, atol=1e-6)
    return judge


def run_probe_cached(fn):
    first_values, second_values = values(0), values(1)
    truths = [torch.relu(first_values), torch.relu(second_values)]
    buffers = [first_values.clone()]

    def call(args):
        return [fn(*args)]

    first = [t.clone() for t in call(buffers)]
    return probe_cached(call, buffers, first, [second_values], "cpu", judge_against(truths))


def test_a_result_cached_by_shape_is_stale_and_an_honest_or_imprecise_one_is_not():
    cache = {}

    def cached(x):
        return cache.setdefault(tuple(x.shape), torch.relu(x))

    findings = run_probe_cached(cached)
    assert [f.trick for f in findings] == ["cached"] and "bit for bit the first call's result" in findings[0].reason
    assert run_probe_cached(torch.relu) == []
    assert run_probe_cached(lambda x: torch.relu(x) * 1.01) == []  # wrong, but not a cache: the case plan says so


def test_a_stale_intermediate_cached_by_pointer_is_caught_by_the_fresh_buffer_call():
    cache = {}

    def stale_scale(x):  # caches the first max it saw for this buffer: right on fresh buffers only
        first_max = cache.setdefault(x.data_ptr(), x.abs().max())
        return torch.relu(x) * (x.abs().max() / first_max)

    findings = run_probe_cached(stale_scale)
    assert [f.trick for f in findings] == ["cached"]
    assert "a call with fresh buffers holding the same values is right" in findings[0].reason


def test_mutated_inputs_are_named_with_the_count_of_changed_elements():
    x, w = values(2), values(3)
    before = [x.clone(), w.clone(), 0.5]
    x.mul_(2)
    findings = probe_mutation(["x", "w", "eps"], before, [x, w, 0.5])
    assert [f.reason for f in findings] == ["mutates its input x (32 of 32 elements changed by the call)"]
    nan = torch.tensor([float("nan"), -0.0])
    assert same_bits(nan, nan.clone()) and not same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))


def test_an_output_aliasing_an_input_is_flagged_unless_the_reference_aliases_it_too():
    x = values(4)
    view = x.view_as(x)
    assert [f.trick for f in probe_alias(["x"], [x], [view], set())] == ["alias"]
    assert probe_alias(["x"], [x], [x.clone()], set()) == []
    assert probe_alias(["x"], [x], [view], aliasing_pairs([x], [x.view(-1)])) == []
    assert probe_alias(["x"], [x], [x[1:].view(-1)], set())  # a slice shares the storage too


@pytest.mark.gpu
def test_work_on_a_side_stream_nobody_waits_for_is_caught_and_the_current_stream_is_not():
    from opgate.verify.backends.base import enable_empty_poisoning

    enable_empty_poisoning()
    x = torch.randn(1 << 20, device="cuda")

    def side_stream(args):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(20_000_000)
            return [args[0] * 2]

    findings = probe_side_stream(side_stream, [x])
    assert [f.trick for f in findings] == ["side_stream"]
    assert probe_side_stream(lambda args: [args[0] * 2], [x]) == []


@pytest.mark.gpu
def test_a_fast_kernel_on_a_private_stream_that_never_waits_for_the_callers_stream_is_caught():
    """bad_scale2_side_stream's shape (issue 13): a microsecond kernel on its own stream is done before a copy on the
    caller's stream is enqueued, so "early copy differs" never fires; with the caller's stream busy until it writes
    the inputs, the kernel reads inputs that are not there yet."""
    from opgate.verify.backends.base import enable_empty_poisoning

    enable_empty_poisoning()
    x = torch.randn(64, 1024, device="cuda")
    expected = (x * 2).cpu()

    def private_stream(args):
        side = torch.cuda.Stream()  # no wait_stream: it does not wait for the caller's stream
        with torch.cuda.stream(side):
            return [args[0] * 2]

    def right(outputs):
        return bool(torch.equal(outputs[0], expected))

    assert [f.trick for f in probe_side_stream(private_stream, [x], right)] == ["side_stream"]
    assert probe_side_stream(lambda args: [args[0] * 2], [x], right) == []


def _probed(*tricks: str) -> CheckResult:
    passed = CheckResult("verify.scale.k.float32", "scale", Outcome.PASSED, "18/18 cases within budget")
    findings = [GamingFinding(trick, f"{trick} finding") for trick in tricks]
    return apply_probe(passed, GamingProbe(findings, ["mutation", "alias", "cached", "side_stream"], {}, "M=4"))


def test_work_on_another_stream_is_class_stream_with_the_interop_fix_not_gaming():
    """A CuPy kernel on the legacy default stream is a common interop mistake: named `stream`, never `gaming`."""
    result = _probed("side_stream")
    assert result.outcome is Outcome.FAILED and result.extra["failure_class"] == "stream"
    assert result.reason.startswith("[stream] side_stream finding (on M=4); the case plan alone: 18/18")
    assert "torch.cuda.current_stream()" in result.remediation
    assert "cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)" in result.remediation
    assert "wait_stream" in result.remediation


def test_a_gaming_trick_beside_a_stream_finding_keeps_the_gaming_class_and_both_reasons():
    result = _probed("cached", "side_stream")
    assert result.extra["failure_class"] == "gaming" and result.reason.startswith("[gaming] cached finding; "
                                                                                  "side_stream finding")
    assert "no result cache" in result.remediation and "ExternalStream" in result.remediation
    assert _probed().outcome is Outcome.PASSED


# -- end to end ----------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_verify_fails_each_gaming_implementation_for_its_trick_and_passes_the_honest_ones(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("TRITON_INTERPRET", None)
    args = [str(SPEC), "--budget", "quick", "--no-extras", "--stages", "numerics", "--op", "relu", "--op", "copy",
            "--json", str(tmp_path / "report.json"), "--out", str(tmp_path / "art")]
    for impl in ("torch", "relu_cached", "relu_inplace", "relu_mutating", "copy_view"):
        args += ["--impl", impl]
    proc = subprocess.run([sys.executable, "-m", "opgate", "verify", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    results = {r["check_id"]: r for r in json.loads((tmp_path / "report.json").read_text())["results"]}
    for honest in ("relu.torch", "copy.torch"):
        result = results[f"verify.{honest}.float32"]
        assert result["outcome"] == "passed", result["reason"]
        assert result["extra"]["gaming"]["findings"] == []
        assert {"cached", "alias", "mutation"} <= set(result["extra"]["gaming"]["probed"])
    expected = {"relu.relu_cached": {"cached"}, "relu.relu_inplace": {"mutation", "alias"},
                "relu.relu_mutating": {"mutation"}, "copy.copy_view": {"alias"}}
    for check, tricks in expected.items():
        result = results[f"verify.{check}.float32"]
        assert result["outcome"] == "failed", (check, result["reason"])
        assert result["extra"]["failure_class"] == "gaming"
        assert {f["trick"] for f in result["extra"]["gaming"]["findings"]} == tricks, check
        assert result["reason"].startswith("[gaming] ")
    assert "cached/stale result" in results["verify.relu.relu_cached.float32"]["reason"]
    assert "mutates its input x" in results["verify.relu.relu_mutating.float32"]["reason"]
    assert "alias of its input x" in results["verify.copy.copy_view.float32"]["reason"]


def _probe_plan(op, dtype="float32"):
    """A calibrated standard plan of `op` (two seeds of each declared size), as the check loads it."""
    from types import SimpleNamespace

    from opgate.verify.calibrate import calibrate, truth_and_baseline
    from opgate.verify.inputs import plan_cases

    cases = plan_cases(op, "standard")
    pairs = [truth_and_baseline(op, c, dtype) for c in cases]
    cal = calibrate(op, dtype, cases, [t for t, _ in pairs], [b for _, b in pairs])
    return SimpleNamespace(cases=cases, truths=[t for t, _ in pairs], budgets=list(cal.budgets),
                           masks=list(cal.masks), dtype=dtype, pooled_rmse=cal.pooled_rmse,
                           pooled_quantile=cal.pooled_quantile, n_calibration_cases=cal.n_cases,
                           summary=cal.summary(), out_dtypes=cal.out_dtypes)


def test_the_probe_takes_the_smallest_declared_size_where_a_call_costs_its_size_and_its_second_seed_from_the_plan():
    """Under Triton's interpreter the probe's calls at fla_kl_div.grad's first declared size cost 13-19 s a dtype,
    and drawing a second case there cost 11-16 s of float64 bound terms; the plan holds a second seed already."""
    from types import SimpleNamespace

    import opgate
    from opgate.verify.gaming import prepare_probe, probe_case_index

    calls = []

    def reference(x):
        calls.append(tuple(x.shape))
        return torch.relu(x)

    op = opgate.Operator("relu", reference=reference, inputs=[opgate.TensorSpec("x", ("M", "N"))],
                         dims={"M": [64, 4], "N": [256, 32]})
    plan = _probe_plan(op)
    user = SimpleNamespace(origin="user", backend="triton")
    first, smallest = probe_case_index(op, plan, smallest=False), probe_case_index(op, plan, smallest=True)
    assert plan.cases[first].dims_dict == {"M": 64, "N": 256} and plan.cases[smallest].dims_dict == {"M": 4, "N": 32}
    calls.clear()
    side = prepare_probe(op, user, plan, smallest=True)
    assert calls == []  # both truths are the plan's: the reference is not called
    assert side.case == plan.cases[smallest] and side.second_case.dims == side.case.dims
    assert side.second_case.seed != side.case.seed and side.second_case in plan.cases
    assert side.truths[1] is plan.truths[plan.cases.index(side.second_case)]


def test_a_deferred_second_seed_gets_its_budgets_from_the_check_and_a_plan_of_one_seed_draws_one():
    from types import SimpleNamespace

    import opgate
    from opgate.verify.gaming import prepare_probe

    op = opgate.Operator("relu", reference=torch.relu, inputs=[opgate.TensorSpec("x", ("N",))], dims={"N": [64]})
    plan = _probe_plan(op)
    user = SimpleNamespace(origin="user", backend="torch")
    second = next(k for k, c in enumerate(plan.cases) if c.origin == "declared" and c.seed != plan.cases[0].seed)
    kept = plan.budgets[second], plan.masks[second]
    plan.budgets[second] = []  # deferred by the calibration
    asked = []
    side = prepare_probe(op, user, plan, smallest=True, budgets_of=lambda k: asked.append(k) or kept)
    assert asked == [second] and side.budgets[1] is kept[0]
    one_seed = SimpleNamespace(**{**vars(plan), "cases": plan.cases[:1], "truths": plan.truths[:1],
                                  "budgets": plan.budgets[:1], "masks": plan.masks[:1]})
    drawn = prepare_probe(op, user, one_seed, smallest=True)
    assert drawn.second_case.seed == one_seed.cases[0].seed + 7_777 and drawn.second_case not in one_seed.cases
    assert drawn.budgets[1]
