"""`opgate verify --stages recovery`: the verdict over out-of-memory trials, the answer comparison and the
planning run here; the trials themselves need a GPU (the gpu test at the end)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opgate_testing import REPO, run_opgate

from opgate.model.results import Outcome
from opgate.gpu.probes.oom import OomTrial, same_answer
from opgate.verify.oom_recovery import judge

GELU = REPO / "examples" / "ops" / "gelu.py"


def _trial(index: int, hit: bool = True, while_full: str = "oom", recovered: bool = True,
           mismatch: str = "") -> OomTrial:
    return OomTrial(index, hit, 139.3, while_full, recovered, 0.25, mismatch)


def test_all_trials_recovered_passes_with_the_mean_time() -> None:
    outcome, reason = judge([_trial(0), _trial(1), _trial(2)])
    assert outcome is Outcome.PASSED
    assert "3/3" in reason and "250 ms" in reason


def test_one_trial_not_recovered_fails_and_says_why() -> None:
    outcome, reason = judge([_trial(0), _trial(1, recovered=False, mismatch="the retry raised RuntimeError: x")])
    assert outcome is Outcome.FAILED
    assert "1/2" in reason and "trial 1: the retry raised RuntimeError" in reason


def test_an_error_other_than_oom_while_full_warns() -> None:
    outcome, reason = judge([_trial(0, while_full="RuntimeError: CUDA error: out of memory in my_ext")])
    assert outcome is Outcome.WARNED and "instead of torch.cuda.OutOfMemoryError" in reason


def test_a_call_that_needs_no_memory_while_full_is_fine() -> None:
    assert judge([_trial(0, while_full="ok")])[0] is Outcome.PASSED


def test_never_reaching_oom_is_skipped() -> None:
    outcome, reason = judge([_trial(0, hit=False), _trial(1, hit=False)])
    assert outcome is Outcome.SKIPPED and "could not be filled" in reason


def test_same_answer_compares_values_nan_and_structure() -> None:
    torch = pytest.importorskip("torch")
    x = torch.tensor([1.0, float("nan"), 3.0])
    assert same_answer(torch, x, x.clone()) == ""
    assert "differs" in same_answer(torch, x, torch.tensor([1.0, float("nan"), 3.5]))
    assert "float16" in same_answer(torch, x, x.half())
    assert same_answer(torch, (x, torch.tensor([1, 2])), (x.clone(), torch.tensor([1, 2]))) == ""
    assert "differs" in same_answer(torch, (x, torch.tensor([1, 2])), (x.clone(), torch.tensor([1, 3])))
    assert "outputs before" in same_answer(torch, (x, x), x)
    assert "NoneType after recovery" in same_answer(torch, x, None)
    half = torch.tensor([1.0, 2.0], dtype=torch.float16)
    assert same_answer(torch, half, half + 0.001) == ""  # a few ulps: non-deterministic reductions


def test_recovery_stage_plans_one_exclusive_check_per_implementation(tmp_path: Path) -> None:
    from opgate.verify.engine import VerifyRequest, gpu_stage_tasks, select
    from opgate.core.spec import load_spec_file

    request = VerifyRequest(spec_file=GELU, stages=["numerics", "recovery"], budget="quick")
    [op] = load_spec_file(GELU)
    [sel] = select([op], request, None)
    tasks, _ = gpu_stage_tasks(sel, request, tmp_path)
    recovery = [t for t in tasks if t.target.endswith("VerifyOomRecoveryCheck")]
    assert {t.check_id for t in recovery} == {"verify.gelu.triton.recovery", "verify.gelu.torch.recovery"}
    assert all(t.exclusive and t.retire_unless_passed and not t.retire for t in recovery)
    assert len(tasks) == len(recovery)


@pytest.mark.gpu
def test_example_recovers_from_out_of_memory(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    out = run_opgate(["verify", str(GELU), "--impl", "triton", "--dtype", "float32", "--budget", "quick",
                      "--no-extras", "--stages", "numerics,recovery", "--json", str(report)], timeout=900)
    results = {r["check_id"]: r for r in json.loads(report.read_text())["results"]}
    recovery = results["verify.gelu.triton.recovery"]
    assert recovery["outcome"] == "passed", recovery["reason"]
    assert all(t["call_while_full"] in ("oom", "ok") for t in recovery["extra"]["trials"])
    # the trials kept all but a room for the retry, and gelu's retry fitted in it
    assert recovery["extra"]["room_bytes"] >= 256 * 2**20
    assert not any(t["freed_all"] for t in recovery["extra"]["trials"])
    assert out.returncode == 0, out.stdout[-3000:]


@pytest.mark.gpu
def test_a_large_output_is_compared_beside_the_kept_filler() -> None:
    # benchmarks/oom_trials.py on an H100 (fifty-fourth session): x * 2 + 1 over 256 MiB fitted in its room, but the
    # float64 comparison of its output beside the kept filler ran out of memory and the trial said "not recovered"
    torch = pytest.importorskip("torch")
    from opgate.gpu.probes.oom import first_call, run_trial

    x = torch.rand(64 << 20, device="cuda")
    before, filler = first_call(torch, lambda t: t * 2 + 1, (x,))
    try:
        trials = [run_trial(torch, lambda t: t * 2 + 1, (x,), before, index, filler) for index in range(3)]
    finally:
        filler.release(torch)
    assert all(t.oom_hit and t.recovered for t in trials), [t.mismatch for t in trials]


def test_a_retry_that_needed_everything_freed_is_said() -> None:
    freed = OomTrial(1, True, 139.3, "oom", True, 0.25, "", freed_all=True)
    outcome, reason = judge([_trial(0), freed])
    assert outcome is Outcome.PASSED and "1 of them ran out of memory again" in reason


def test_an_answer_within_the_implementations_own_run_to_run_spread_is_the_same() -> None:
    """cut-cross-entropy's backward adds partial gradients under a lock in float16: two calls differ, and on an H100
    its recovery trials failed although every call with the GPU full succeeded. The second call with memory free
    measures that spread; a broken state still differs by far more."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from opgate.gpu.probes.oom import SPREAD_MARGIN, run_to_run_spread

    no_gpu = SimpleNamespace(cuda=SimpleNamespace(synchronize=lambda: None), isfinite=torch.isfinite)
    base = torch.linspace(-1.0, 1.0, 1000, dtype=torch.float16)
    base[0] = 0.0
    calls = iter([base + (0.004 * (torch.arange(1000) % 3 == 1)).half()])
    spread = run_to_run_spread(no_gpu, lambda: (next(calls), torch.tensor([1, 2])), (), (base, torch.tensor([1, 2])))
    assert spread[0] == pytest.approx(0.004, abs=0.001) and spread[1] == 0.0
    after = base.clone()
    after[0] = 0.006  # where the truth is 0, no relative tolerance covers it: the spread does
    assert "differs" in same_answer(torch, base, after)
    assert same_answer(torch, (base, torch.tensor([1, 2])), (after, torch.tensor([1, 2])), spread) == ""
    broken = base.clone()
    broken[0] = SPREAD_MARGIN * spread[0] * 2
    assert "by more than 4x its run-to-run spread (0.00" in same_answer(torch, base, broken, spread[:1])
