"""The verdict cache (verify/verdict_cache.py, verdict_reuse.py): an unchanged spec file's verdicts are reused, a
changed file (or a module it imports, an option, the environment that steers the kernels) is judged again, and
only wholly judged files without an `error` are stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opgate.model.results import CheckResult, Outcome, RunReport
from opgate.verify.engine import VerifyRequest
from opgate.verify.verdict_cache import VerdictCache
from opgate.verify.verdict_reuse import _store_judged
from test_verify_many import run_verify, write_spec


IMPORT_KERNELS = "import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).parent))\nimport kernels\n"


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    monkeypatch.setenv("OPGATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("OPGATE_VERDICT_CACHE", "1")
    monkeypatch.delenv("OPGATE_CACHE", raising=False)
    return tmp_path / "cache"


def _cache(request: VerifyRequest) -> VerdictCache:
    cache = VerdictCache.for_request(request)
    assert cache is not None
    return cache


def test_a_key_changes_with_the_spec_its_local_imports_the_options_and_the_steering_environment(
        tmp_path, cache_on, monkeypatch):
    (tmp_path / "kernels.py").write_text("def relu(x):\n    return x.clamp_min(0)\n")
    spec = write_spec(tmp_path / "relu.py", "relu", "torch.relu(x)", implementation="kernels.relu(x)")
    spec.write_text("import kernels\n" + spec.read_text())
    request = VerifyRequest(spec_file=spec, budget="quick")
    first = _cache(request).key(spec)
    assert _cache(request).key(spec) == first
    assert _cache(VerifyRequest(spec_file=spec, budget="quick", jobs=7)).key(spec) == first  # --jobs judges alike
    monkeypatch.setenv("SOME_UNRELATED_VARIABLE", "1")
    assert _cache(request).key(spec) == first
    monkeypatch.setenv("OPGATE_CALIBRATION_PROCESSES", "0")  # how many processes calibrate: judged alike
    assert _cache(request).key(spec) == first
    monkeypatch.setenv("OPGATE_PLAN_ORDER", "elements")  # the order plans calibrate in: judged alike
    assert _cache(request).key(spec) == first
    assert _cache(VerifyRequest(spec_file=spec, budget="standard")).key(spec) != first
    assert _cache(VerifyRequest(spec_file=spec, budget="quick", dtypes=["float16"])).key(spec) != first
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    assert _cache(request).key(spec) != first
    monkeypatch.delenv("TRITON_DEFAULT_FP_FUSION")
    (tmp_path / "kernels.py").write_text("def relu(x):\n    return x.clamp_min(0)  # edited\n")
    assert _cache(request).key(spec) != first


def test_the_cache_is_off_for_a_partial_or_uncached_run(tmp_path, cache_on, monkeypatch):
    spec = write_spec(tmp_path / "relu.py", "relu", "torch.relu(x)")
    assert VerdictCache.for_request(VerifyRequest(spec_file=spec, ops=["relu"])) is None
    assert VerdictCache.for_request(VerifyRequest(spec_file=spec, impls=["torch"])) is None
    assert VerdictCache.for_request(VerifyRequest(spec_file=spec, replay="ogv1.x")) is None
    monkeypatch.setenv("OPGATE_VERDICT_CACHE", "0")
    assert VerdictCache.for_request(VerifyRequest(spec_file=spec)) is None
    monkeypatch.setenv("OPGATE_VERDICT_CACHE", "1")
    monkeypatch.setenv("OPGATE_CACHE", "0")  # --no-cache
    assert VerdictCache.for_request(VerifyRequest(spec_file=spec)) is None


def _result(check_id: str, outcome: Outcome, spec: Path | None) -> CheckResult:
    return CheckResult(check_id, check_id, outcome, "r", extra={"spec_file": str(spec)} if spec else {},
                       labels={"op": check_id.split(".")[1]})


def _report(results: list[CheckResult], **extra) -> RunReport:
    return RunReport(verb="verify", results=tuple(results), started_at="t", duration_s=1.0,
                     extra={"case_counts": {"relu": 3, "tanh": 4}, **extra})


def test_only_a_wholly_judged_file_without_errors_is_stored(tmp_path, cache_on):
    relu = write_spec(tmp_path / "relu.py", "relu", "torch.relu(x)")
    tanh = write_spec(tmp_path / "tanh.py", "tanh", "torch.tanh(x)")
    cache = _cache(VerifyRequest(spec_file=relu, spec_files=(relu, tanh)))
    report = _report([_result("verify.relu.torch.float32", Outcome.FAILED, relu),
                      _result("verify.tanh.torch.float32", Outcome.ERROR, tanh)])
    assert _store_judged(cache, report, [relu, tanh], "then") == [relu]  # a failure is a verdict, an error is not
    stored = cache.load(relu)
    assert stored is not None and stored.case_counts == {"relu": 3} and stored.judged_at == "then"
    assert [r.outcome for r in stored.results] == [Outcome.FAILED]
    assert cache.load(tanh) is None
    # an interrupted run, or a finding no file owns (a leaked process), stores nothing
    passed = [_result("verify.tanh.torch.float32", Outcome.PASSED, tanh)]
    assert _store_judged(cache, _report(passed, interrupted=True, not_run=["x"]), [tanh], "t") == []
    leaked = _result("verify.leaked_processes", Outcome.FAILED, None)
    assert _store_judged(cache, _report([*passed, leaked]), [tanh], "t") == []
    # an entry that cannot be read is a miss, not an error
    entry = next((cache_on / "verdicts").rglob("*.json"))
    entry.write_text("{not json")
    assert cache.load(relu) is None


@pytest.mark.slow
def test_an_unchanged_library_is_judged_once_and_a_changed_file_again(tmp_path, monkeypatch):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "kernels.py").write_text("def relu(x):\n    return x.clamp_min(0)\n")
    relu = write_spec(specs / "relu.py", "relu", "torch.relu(x)", implementation="kernels.relu(x)")
    relu.write_text(IMPORT_KERNELS + relu.read_text())
    write_spec(specs / "scale.py", "scale", "x * 2", implementation="x * 2 + (x.shape[-1] == 33)")  # wrong at N=33
    cache = tmp_path / "cache"
    monkeypatch.setenv("OPGATE_VERDICT_CACHE", "1")
    reports = []
    for name, edit in (("first", None), ("unchanged", None), ("kernel edited", "  # faster\n")):
        if edit:
            (specs / "kernels.py").write_text((specs / "kernels.py").read_text() + edit)
        path = tmp_path / f"{len(reports)}.json"
        proc = run_verify(str(specs), "--json", str(path), cache=cache)
        assert proc.returncode == 1, f"{name}: {proc.stdout}{proc.stderr}"  # scale's failure, every time
        reports.append((proc.stdout, json.loads(path.read_text())))
    (_, first), (said, unchanged), (_, edited) = reports
    assert first["extra"]["verdict_cache"]["stored"] == [str(relu), str(specs / "scale.py")]

    def outcomes(report):
        return {r["check_id"]: r["outcome"] for r in report["results"]}

    assert outcomes(unchanged) == outcomes(first) and outcomes(edited) == outcomes(first)
    assert unchanged["extra"]["verdict_cache"]["judged"] == []
    assert all(r["extra"].get("cached_from") for r in unchanged["results"])
    assert "2 of 2 spec file(s) unchanged" in said and "(reused)" in said
    assert unchanged["extra"]["case_counts"] == first["extra"]["case_counts"]
    # the edited kernel module re-judges the spec that imports it, and only that one
    assert edited["extra"]["verdict_cache"]["judged"] == [str(relu)]
    assert list(edited["extra"]["verdict_cache"]["reused"]) == [str(specs / "scale.py")]
    assert not any(r["extra"].get("cached_from") for r in edited["results"] if r["check_id"].startswith("verify.relu"))


def _verify_env(cache: Path) -> dict[str, str]:
    """A child `opgate verify`'s environment: this checkout, the cache at `cache` with verdicts on, and the
    calibration in the parent's thread (plans handed over in file order)."""
    import os

    from tests_verify_support import SRC

    return {**os.environ, "PYTHONPATH": str(SRC), "OPGATE_CACHE_DIR": str(cache), "OPGATE_VERDICT_CACHE": "1",
            "OPGATE_CALIBRATION_PROCESSES": "0"}


def _stopped_once_started(specs: Path, cache: Path, report: Path) -> tuple[int, str]:
    """`opgate verify specs` on one slot, sent SIGTERM once a check has touched specs/started (a CI job's limit
    reached while that check hangs); its exit code and stderr."""
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "opgate", "verify", str(specs), "--budget", "quick", "--no-extras",
                             "--stages", "numerics", "--jobs", "1", "--json", str(report)], env=_verify_env(cache),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (specs / "started").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (specs / "started").exists(), proc.communicate(timeout=60)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, stderr


SLOW_UNTIL_RELEASED = '''
import pathlib
import time

import torch
import opgate

HERE = pathlib.Path(__file__).parent

slow = opgate.Operator(
    "slow",
    reference=lambda x: x * 3,
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [2], "N": [8]},
    dtypes=["float32"],
)


@slow.implementation("torch")
def slow_torch(x):
    if not (HERE / "release").exists():  # the first run is stopped here
        (HERE / "started").touch()
        time.sleep(120)
    return x * 3
'''


def test_an_interrupted_run_stores_the_files_it_judged_wholly_and_the_next_run_judges_the_rest(tmp_path, monkeypatch):
    """A CI job stopped by its time limit keeps what it finished: the spec files whose every task ran are stored,
    the report so far says so, and the next run reuses them and judges only the others."""
    specs = tmp_path / "specs"
    specs.mkdir()
    relu = write_spec(specs / "a_relu.py", "relu", "torch.relu(x)")
    slow = specs / "b_slow.py"
    slow.write_text(SLOW_UNTIL_RELEASED)
    cache, first = tmp_path / "cache", tmp_path / "first.json"
    # one slot and the calibration in this thread: a_relu's check runs before b_slow's, which then waits
    returncode, stderr = _stopped_once_started(specs, cache, first)
    assert returncode == 130, stderr
    assert "1 spec file(s) judged wholly before the interrupt are in the verdict cache" in stderr, stderr
    report = json.loads(first.read_text())
    assert report["interrupted"] is True
    assert report["extra"]["verdict_cache"]["stored"] == [str(relu)]
    assert report["extra"]["complete_files"] == [str(relu)]

    (specs / "release").touch()
    second = tmp_path / "second.json"
    monkeypatch.setenv("OPGATE_VERDICT_CACHE", "1")
    proc2 = run_verify(str(specs), "--json", str(second), cache=cache)
    assert proc2.returncode == 0, proc2.stdout + proc2.stderr
    rerun = json.loads(second.read_text())
    assert list(rerun["extra"]["verdict_cache"]["reused"]) == [str(relu)]
    assert rerun["extra"]["verdict_cache"]["judged"] == [str(slow)]
    outcomes = {r["check_id"]: (r["outcome"], bool(r["extra"].get("cached_from"))) for r in rerun["results"]}
    assert outcomes["verify.relu.torch.float32"] == ("passed", True)
    assert outcomes["verify.slow.torch.float32"] == ("passed", False)


def test_after_an_interrupt_a_file_is_complete_only_when_every_operator_is_calibrated_and_every_task_finished():
    """PreparedRun.complete_files: a file with an operator still calibrating, a task not run, a task handed over but
    never taken, or a check id that names no operator (then no file: it cannot be attributed) is not complete."""
    from types import SimpleNamespace

    from opgate.engine.runner import TaskFeed
    from opgate.verify.engine import PreparedRun

    def job(name):
        return SimpleNamespace(op=SimpleNamespace(name=name))

    def prepared(done, handed_over):
        calibrator = SimpleNamespace(jobs=[job("relu"), job("relu.grad"), job("tanh")], operators_done=set(done),
                                     task_keys=dict.fromkeys(handed_over, (40, 0, 0)))
        return PreparedRun(tasks=[], preset=[], info={}, feed=TaskFeed(0), calibrator=calibrator,
                           task_keys=dict.fromkeys(["verify.relu.torch.float32.runtime",
                                                    "verify.tanh.torch.float32.runtime"], (10, 0, 0)),
                           spec_of_op={"relu": "a.py", "relu.grad": "a.py", "tanh": "b.py"})

    def finished(*ids):
        return [CheckResult(i, i, Outcome.PASSED, "r") for i in ids]

    every = ["verify.relu.torch.float32", "verify.relu.grad.torch.float32", "verify.tanh.torch.float32"]
    runtime = ["verify.relu.torch.float32.runtime", "verify.tanh.torch.float32.runtime"]
    whole = prepared(["relu", "relu.grad", "tanh"], every)
    assert whole.complete_files(finished(*every, *runtime), []) == ["a.py", "b.py"]
    # tanh's runtime check had not run; relu.grad's check was handed over but never started
    assert whole.complete_files(finished(*every, runtime[0]), [runtime[1]]) == ["a.py"]
    assert whole.complete_files(finished(every[0], every[2], *runtime), []) == ["b.py"]
    # relu.grad still calibrating: a.py is not complete, though every task it has so far finished
    assert prepared(["relu", "tanh"], [every[0], every[2]]).complete_files(
        finished(every[0], every[2], *runtime), []) == ["b.py"]
    # a task whose id names no operator of the run cannot be attributed: nothing is complete
    assert whole.complete_files(finished(*every, *runtime), ["verify.something_else.x"]) == []


FAST_AND_SLOW = '''
import pathlib
import time

import torch
import opgate

HERE = pathlib.Path(__file__).parent

fast = opgate.Operator("fast", reference=lambda x: x + 1, inputs=[opgate.TensorSpec("x", ("M", "N"))],
                       dims={"M": [2], "N": [8]}, dtypes=["float32"])


@fast.implementation("torch")
def fast_torch(x):
    return x + 1


slow = opgate.Operator("slow", reference=lambda x: x * 3, inputs=[opgate.TensorSpec("x", ("M", "N"))],
                       dims={"M": [2], "N": [8]}, dtypes=["float32", "bfloat16"])


@slow.implementation("torch")
def slow_torch(x):
    if x.dtype == torch.bfloat16 and not (HERE / "release").exists():  # the first run is stopped here
        (HERE / "started").touch()
        time.sleep(120)
    return x * 3
'''


def test_an_interrupted_file_keeps_its_finished_checks_and_the_next_run_runs_only_the_rest(tmp_path, monkeypatch):
    """A file no run judged wholly (the library on the H200: every file still had measurements to run at the limit)
    keeps what finished: the next run neither calibrates a settled operator again nor runs its checks, and stores
    the file whole once every check has run; the run after that reuses the file."""

    specs = tmp_path / "specs"
    specs.mkdir()
    spec = specs / "ops.py"
    spec.write_text(FAST_AND_SLOW)
    cache, first = tmp_path / "cache", tmp_path / "first.json"
    # one slot and the calibration in this thread: fast's check and slow's float32 check finish before slow's
    # bfloat16 check (the last handed over) starts and hangs
    returncode, stderr = _stopped_once_started(specs, cache, first)
    assert returncode == 130, stderr
    assert "the finished checks of 1 spec file(s) judged in part are in the verdict cache" in stderr, stderr
    report = json.loads(first.read_text())
    assert report["extra"]["verdict_cache"]["stored_in_part"] == [str(spec)]
    assert report["extra"]["settled_operators"] == ["fast"]
    assert report["extra"]["settled_dtypes"] == {"fast": ["float32"], "slow": ["float32"]}

    (specs / "release").touch()
    monkeypatch.setenv("OPGATE_VERDICT_CACHE", "1")
    reports = []
    for name in ("second", "third"):
        proc = run_verify(str(specs), "--json", str(tmp_path / f"{name}.json"), cache=cache)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        reports.append((proc.stdout, json.loads((tmp_path / f"{name}.json").read_text())))
    (said, second), (_, third) = reports
    reused = {r["check_id"]: bool(r["extra"].get("cached_from")) for r in second["results"]}
    # slow's calibration result is the first run's: it calibrated slow whole, and only bfloat16 is calibrated again
    assert reused == {"verify.fast.calibration": True, "verify.fast.torch.float32": True,
                      "verify.slow.calibration": True, "verify.slow.torch.float32": True,
                      "verify.slow.torch.bfloat16": False}
    assert "1 spec file(s) judged in part before (4 finished results stored)" in said, said
    assert list(second["extra"]["engine"]["calibration_spans_s"]) == ["slow bfloat16"]
    assert second["extra"]["case_counts"] == report["extra"]["case_counts"] == {"fast": 25, "slow": 25}
    assert second["extra"]["verdict_cache"]["resumed"] == {str(spec): 4}
    assert second["extra"]["settled_operators"] == ["fast", "slow"]
    assert second["extra"]["verdict_cache"]["stored"] == [str(spec)]
    assert list(third["extra"]["verdict_cache"]["reused"]) == [str(spec)]
    assert {r["check_id"]: r["outcome"] for r in third["results"]} == {
        r["check_id"]: r["outcome"] for r in second["results"]}
    assert not list((cache / "verdicts").rglob("*.partial.json"))  # the whole entry replaced the partial one


def test_a_file_with_an_error_keeps_its_other_checks_and_the_operators_they_settle(tmp_path, cache_on):
    """An `error` may not recur: that check is judged again, the rest of the file is not (verify/resumed.py)."""
    from opgate.verify.resumed import ResumedChecks
    from opgate.verify.verdict_reuse import _store_in_part

    relu = write_spec(tmp_path / "relu.py", "relu", "torch.relu(x)")
    cache = _cache(VerifyRequest(spec_file=relu))
    report = _report([_result("verify.relu.calibration", Outcome.PASSED, relu),
                      _result("verify.relu.torch.float32", Outcome.FAILED, relu),
                      _result("verify.relu.torch.float32.runtime", Outcome.ERROR, relu)],
                     settled_operators=["relu"])
    assert _store_in_part(cache, report, [relu], "then") == [relu]
    assert cache.load(relu) is None  # not a whole entry
    part = cache.load(relu, partial=True)
    assert part is not None and part.settled == ("relu",) and part.case_counts == {"relu": 3}
    assert [r.check_id for r in part.results] == ["verify.relu.calibration", "verify.relu.torch.float32"]
    # without the engine's word on settled operators (a whole-spec stage ran), nothing is stored in part
    assert _store_in_part(cache, _report(report.results[:2]), [relu], "t") == []

    resumed = ResumedChecks()
    resumed.add(part.results, part.settled, part.case_counts)
    from opgate.engine.runner import CheckTask
    from opgate.checks.base import CheckContext

    def task(check_id):
        return CheckTask(check_id, check_id, "t", 1.0, CheckContext(verb="verify"))

    kept, stored = resumed.take([(10, task("verify.relu.torch.float32")), (30, task("verify.relu.torch.float32.runtime")),
                                 (42, task("verify.relu.torch.float32.runtime_warm_up"))])
    assert [t.check_id for _, t in kept] == ["verify.relu.torch.float32.runtime",
                                            "verify.relu.torch.float32.runtime_warm_up"]
    assert [r.check_id for r in stored] == ["verify.relu.torch.float32"]
    # the settled operator's other stored results, once each; an unsettled operator has none to give
    assert [r.check_id for r in resumed.of_settled("relu")] == ["verify.relu.calibration"]
    assert resumed.of_settled("relu") == [] and resumed.of_settled("tanh") == []
    # an operator that is not settled skips the dtypes settled before, only while its stored calibration (of all its
    # dtypes) stands for them and a dtype is left to calibrate
    partly = ResumedChecks()
    partly.add([_result("verify.tanh.calibration", Outcome.PASSED, relu)], [], {}, {"tanh": ["float32"]})
    assert partly.skippable_dtypes("tanh", ["float32", "float16"]) == ["float32"]
    assert partly.skippable_dtypes("tanh", ["float32"]) == []  # nothing left: calibrated as a whole operator
    assert ResumedChecks(settled_dtypes={"tanh": {"float32"}}).skippable_dtypes("tanh", ["float32", "float16"]) == []
    # the warm-up of a stored runtime check does not run either (it serves only that check)
    resumed.add([_result("verify.relu.torch.float32.runtime", Outcome.PASSED, relu)], [], {})
    kept, stored = resumed.take([(30, task("verify.relu.torch.float32.runtime")),
                                 (42, task("verify.relu.torch.float32.runtime_warm_up"))])
    assert kept == [] and [r.check_id for r in stored] == ["verify.relu.torch.float32.runtime"]


def test_a_run_given_a_time_limit_stops_itself_there_keeps_what_it_judged_and_says_why(tmp_path):
    """--time-limit: the run stops as on SIGTERM before a CI job's own limit would kill it without a report; its
    exit code says what it found (3 here: nothing failed, not everything judged), the report says why it stopped,
    and the finished checks are kept for the next run."""
    import subprocess
    import sys


    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "ops.py").write_text(FAST_AND_SLOW)  # slow's check hangs: the limit stops the run there
    cache, report_path = tmp_path / "cache", tmp_path / "report.json"
    env = _verify_env(cache)
    proc = subprocess.run([sys.executable, "-m", "opgate", "verify", str(specs), "--budget", "quick", "--no-extras",
                           "--stages", "numerics", "--jobs", "2", "--json", str(report_path), "--time-limit", "30"],
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "--time-limit 30 s reached" in proc.stderr, proc.stderr
    report = json.loads(report_path.read_text())
    assert report["interrupted"] is True and report["extra"]["time_limit_s"] == 30 and report["exit_code"] == 3
    assert report["extra"]["verdict_cache"]["stored_in_part"] == [str(specs / "ops.py")]
    assert {r["check_id"]: r["outcome"] for r in report["results"]}["verify.fast.torch.float32"] == "passed"
    bad = subprocess.run([sys.executable, "-m", "opgate", "verify", str(specs), "--time-limit", "0"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--time-limit" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_a_time_limit_that_comes_while_the_run_closes_leaves_its_finished_report_complete(tmp_path, monkeypatch):
    """Every check ended and the report was finished when the --time-limit came (the run was closing its workers):
    that report is the run's verdict, not an interrupted one; an interrupt before the report was finished, or a
    SIGTERM from outside, still ends the run as interrupted."""
    from opgate.cli.main import make_console
    from opgate.engine import children, interrupts
    from opgate.model.results import ExitCode, RunReport
    from opgate.verify import engine

    monkeypatch.setenv("OPGATE_CACHE_DIR", str(tmp_path / "cache"))
    passed = RunReport("verify", (_result("verify.relu.torch.float32", Outcome.PASSED, tmp_path / "ops.py"),), "", 5.0,
                       extra={"budget": "quick", "gpu": False})

    def closing_interrupted(reports: int):
        def judged(request, console, resumed, keep, so_far):
            so_far.ended = passed  # the session's report, then the finished one
            so_far.finished = passed if reports == 2 else None
            raise KeyboardInterrupt  # what raise_interrupt raises on the limit's SIGTERM
        return judged

    request = engine.VerifyRequest(spec_file=tmp_path / "ops.py")
    try:
        monkeypatch.setattr(interrupts, "_TIME_LIMIT", [30.0])
        monkeypatch.setattr(engine, "_judge_checks", closing_interrupted(2))
        report = engine._judge(request, make_console())
        assert not report.extra.get("interrupted") and report.extra["time_limit_met_while_closing_s"] == 30.0
        assert report.exit_code == ExitCode.OK
        monkeypatch.setattr(engine, "_judge_checks", closing_interrupted(1))  # the report not yet finished
        with pytest.raises(interrupts.RunInterrupted) as stopped:
            engine._judge(request, make_console())
        assert stopped.value.report.extra["interrupted"] and stopped.value.report.exit_code == ExitCode.INTERNAL_ERROR
        monkeypatch.setattr(interrupts, "_TIME_LIMIT", [])  # a SIGTERM from outside, not the run's own limit
        monkeypatch.setattr(engine, "_judge_checks", closing_interrupted(2))
        with pytest.raises(interrupts.RunInterrupted):
            engine._judge(request, make_console())
    finally:
        children.start_afresh()
