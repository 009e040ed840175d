"""A crash of the implementation on one case is a FAIL of that implementation (failure class `crash`) naming
the case, its replay token, how the process ended and its last stderr lines; the other cases still run in a
fresh process. Real child processes: tests/data/verify/crash_on_one_case.py segfaults (ctypes), aborts
(os.abort), calls os._exit and hangs on the one case of its quick plan that has a size of 63, and aborts on
every case.
"""

from __future__ import annotations

import json
import time
import os
import subprocess
import sys

import pytest

from tests_verify_support import DATA, ROOT, SRC

from opgate.model.results import CheckResult, Outcome
from opgate.verify.replay import ReplayToken
from opgate.verify.resume import CHECK_TARGET, MAX_CRASHES, death_status, stderr_excerpt

SPEC = DATA / "crash_on_one_case.py"
CASE_TIMEOUT = 4
STATUS = {"segfaults": "killed its process with SIGSEGV", "aborts": "killed its process with SIGABRT",
          "exits": "exited with code 7", "hangs": f"timed out after {CASE_TIMEOUT} s"}
STDERR_SHOWN = {"segfaults": "Fatal Python error: Segmentation fault", "aborts": "Fatal Python error: Aborted",
                "hangs": f"Timeout (0:00:0{CASE_TIMEOUT})!"}


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(SRC), **(env or {})}
    return subprocess.run([sys.executable, "-m", "opgate", "verify", *args, "--stages", "numerics", "--no-extras",
                           "--budget", "quick"], cwd=ROOT, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


def crash_cases() -> list[str]:
    """Labels of the quick plan's cases the crashing implementations die on (computed, not assumed)."""
    from opgate.verify.inputs import plan_cases
    from opgate.core.spec import load_spec_file

    op = load_spec_file(SPEC)[0]
    return [c.label() for c in plan_cases(op, "quick", 0) if 63 in c.dims_dict.values()]


@pytest.fixture(scope="module")
def crash_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("crash-run")
    proc = run_cli(str(SPEC), "--case-timeout", str(CASE_TIMEOUT), "--jobs", "2", "--json", str(out / "r.json"))
    report = json.loads((out / "r.json").read_text())
    return proc, {r["check_id"]: r for r in report["results"]}


@pytest.mark.slow
def test_each_crash_is_a_failure_naming_its_case_and_the_rest_is_judged(crash_run):
    proc, results = crash_run
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert results["verify.double.torch.float32"]["outcome"] == "passed"
    expected = crash_cases()
    assert 1 <= len(expected) < MAX_CRASHES
    for impl, status in STATUS.items():
        result = results[f"verify.double.{impl}.float32"]
        extra = result["extra"]
        assert result["outcome"] == "failed", (impl, result["reason"])
        assert extra["failure_class"] == "crash"
        assert [c["label"] for c in extra["crashes"]] == expected, impl
        crash = extra["crashes"][0]
        assert status in crash["status"] and status in result["reason"], (impl, result["reason"])
        assert expected[0] in result["reason"] and "--replay ogv1." in result["reason"]
        token = ReplayToken.decode(crash["replay"])
        assert (token.impl, token.case.label()) == (impl, expected[0])
        judged = [c for c in extra["cases"] if c["passed"]]
        assert len(extra["cases"]) == extra["cases_planned"] == len(judged) + len(expected)
        assert extra["cases_judged"] == len(judged) and extra["cases_not_run"] == 0
        if impl in STDERR_SHOWN:
            assert STDERR_SHOWN[impl] in crash["stderr_tail"]


@pytest.mark.slow
def test_the_terminal_shows_the_case_the_replay_command_and_the_stderr_tail(crash_run):
    proc, results = crash_run
    for impl in STATUS:
        crash = results[f"verify.double.{impl}.float32"]["extra"]["crashes"][0]
        assert f"verify.double.{impl}.float32: the implementation {crash['status']}" in proc.stdout
        assert f"--replay {crash['replay']}" in proc.stdout  # whole, on its own line
    for impl, line in STDERR_SHOWN.items():
        assert f"| {line}" in proc.stdout, impl
    assert "in double_segfaults" in proc.stdout and "in double_hangs" in proc.stdout  # the user's frame
    assert "re-run with --check" not in proc.stdout


@pytest.mark.slow
def test_replaying_the_crashed_case_crashes_again_as_a_verdict(crash_run, tmp_path):
    _, results = crash_run
    token = results["verify.double.segfaults.float32"]["extra"]["crashes"][0]["replay"]
    proc = run_cli(str(SPEC), "--replay", token, "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "r.json").read_text())
    result = {r["check_id"]: r for r in report["results"]}["verify.double.segfaults.float32"]
    assert result["outcome"] == "failed" and result["extra"]["failure_class"] == "crash"
    assert result["extra"]["cases_planned"] == 1 and "SIGSEGV" in result["reason"]


@pytest.mark.slow
def test_a_crash_on_every_case_stops_after_the_bound_and_counts_the_rest(crash_run):
    _, results = crash_run
    crashed = results["verify.double.aborts_always.float32"]
    extra = crashed["extra"]
    assert crashed["outcome"] == "failed" and extra["failure_class"] == "crash"
    assert len(extra["crashes"]) == MAX_CRASHES and all("SIGABRT" in c["status"] for c in extra["crashes"])
    assert extra["cases_not_run"] == extra["cases_planned"] - MAX_CRASHES > 0
    assert f"{extra['cases_not_run']} case(s) not run" in crashed["reason"]


def test_a_death_in_opgates_own_set_up_stays_an_internal_error(tmp_path):
    proc = run_cli(str(SPEC), "--impl", "torch", "--json", str(tmp_path / "r.json"),
                   env={"OPGATE_TEST_DIE_IN_SETUP": "1"})
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = {r["check_id"]: r for r in json.loads((tmp_path / "r.json").read_text())["results"]}
    result = results["verify.double.torch.float32"]
    assert result["outcome"] == "error"
    assert "exited with code 9" in result["reason"] and "while setting up" in result["reason"]
    assert "opgate's own code" in result["reason"] and "--check" not in result["remediation"]


# -- the pieces, on recorded text -----------------------------------------------------------------------

def _died(**extra) -> CheckResult:
    return CheckResult("verify.x.y.float32", "x", Outcome.ERROR, "check process died", extra=extra)


def test_death_status_words():
    assert death_status(_died(returncode=-11), {}) == "killed its process with SIGSEGV"
    assert death_status(_died(returncode=-6), {}) == "killed its process with SIGABRT"
    assert death_status(_died(timeout_s=20.0), {}) == "timed out after 20 s (killed by opgate)"
    assert death_status(_died(returncode=1, stderr_tail="x\nTimeout (0:05:00)!\nThread 0x1"), {}).startswith(
        "timed out after 300 s")
    assert death_status(_died(returncode=75), {"cuda_fault": "torch: CUDA error: an illegal memory access"}) \
        == "left the CUDA context unusable (torch: CUDA error: an illegal memory access)"
    assert death_status(_died(returncode=7), {}).startswith("exited with code 7 without reporting")


def test_a_hang_timers_dump_whose_first_line_fell_out_of_the_tail_is_still_a_hang():
    """attorch's NLL loss gradient compiled one Triton kernel past the 300 s case limit; the dump of the worker's
    threads pushed "Timeout (0:05:00)!" out of the 2,000-character tail, and the death read as a [crash]."""
    frames = "\n".join(f'  File "/x/triton/compiler.py", line {n} in compile' for n in range(40)) + \
        '\n  File "<frozen runpy>", line 198 in _run_module_as_main\n\n'
    marker = {"phase": "case", "limit_s": 300.0}
    assert death_status(_died(returncode=1, stderr_tail=frames), marker).startswith("timed out after 300 s (a hang")
    traceback_text = 'Traceback (most recent call last):\n  File "/x/spec.py", line 3, in fn\nSystemExit: 1\n'
    assert death_status(_died(returncode=1, stderr_tail=traceback_text), marker).startswith("exited with code 1")
    assert death_status(_died(returncode=1, stderr_tail=frames), {}).startswith("exited with code 1")


def test_stderr_excerpt_keeps_the_error_and_the_innermost_frames():
    tail = "\n".join([
        "some warning from import",
        "double free or corruption (out)",
        "Fatal Python error: Aborted",
        "",
        "Current thread 0x00007f (most recent call first):",
        *[f'  File "/p/f{i}.py", line {i} in f{i}' for i in range(10)],
        "",
        "Extension modules: numpy.core._multiarray_umath, torch._C (total: 20)",
    ])
    lines = stderr_excerpt(tail)
    assert lines[:3] == ["some warning from import", "double free or corruption (out)", "Fatal Python error: Aborted"]
    assert lines[4:] == [f'  File "/p/f{i}.py", line {i} in f{i}' for i in range(4)]
    assert not any("Extension modules" in line for line in lines)


def test_the_resume_hook_targets_the_verify_check():
    from opgate.verify.engine import CHECK_TARGET as ENGINE_TARGET

    assert CHECK_TARGET == ENGINE_TARGET


@pytest.mark.slow
def test_a_crash_while_shrinking_ends_shrinking_and_is_reported_with_the_other_failures(crash_run):
    from opgate.verify.inputs import plan_cases
    from opgate.core.spec import load_spec_file

    _, results = crash_run
    result = results["verify.double.crashes_while_shrinking.float32"]
    extra = result["extra"]
    assert result["outcome"] == "failed" and extra["failure_class"] == "crash"
    crash = extra["crashes"][0]
    assert crash["label"].startswith("M=5,") and "SIGABRT" in crash["status"]
    if not any(c.dims_dict["M"] == 5 for c in plan_cases(load_spec_file(SPEC)[0], "quick", 0)):
        assert crash["phase"] == "shrink" and "while narrowing down a failure" in result["reason"]
    assert "other failures: " in result["reason"]  # the M=8 cases are wrong, and say so
    wrong = [c for c in extra["cases"] if not c["passed"]]
    assert wrong and all(c["case"].startswith("M=8,") for c in wrong)


def test_the_parent_resumes_after_a_death_in_a_call_but_not_after_the_whole_timeout(tmp_path):
    from opgate.checks.base import CheckContext
    from opgate.engine.runner import CheckTask
    from opgate.verify.inputs import Case
    from opgate.verify.resume import CaseJournal, follow_up, read_crashes

    options = {"workdir": str(tmp_path / "work")}
    task = CheckTask("verify.x.y.float32", "x", CHECK_TARGET, 20.0, CheckContext(verb="verify", options=options))
    journal = CaseJournal.open(options)
    case = Case.make({"N": 63}, 7)
    with pytest.raises(RuntimeError):
        with journal.implementation_call(case, 3):  # the child is inside the call when it dies
            raise RuntimeError("the marker stays on the case")
    slow = follow_up(task, _died(timeout_s=20.0, stderr_tail=""))
    assert isinstance(slow, CheckResult) and slow.outcome is Outcome.ERROR
    assert "N=63 seed=7" in slow.reason and "took longer than --timeout" in slow.reason
    assert follow_up(task, _died(returncode=-11, stderr_tail="Fatal Python error")) is task
    (crash,) = read_crashes(tmp_path / "work" / "journal")
    assert (crash.index, crash.phase, crash.label, crash.status) == (
        3, "case", case.label(), "killed its process with SIGSEGV")


def test_a_hang_inside_a_jit_compile_leaves_its_case_not_judged_not_crashed(tmp_path):
    """The child marks a JIT compile while it runs (Triton's jit hooks call resume.compile_started/finished); a hang
    past the case limit with that mark is the compiler's (LLVM's O3 ran for minutes on fla's token_shift backward
    at D=65537): the case is not judged, and a new call first drops a mark a compile that raised left behind."""
    from opgate.checks.base import CheckContext
    from opgate.engine.runner import CheckTask
    from opgate.verify import resume
    from opgate.verify.inputs import Case
    from opgate.verify.resume import COMPILING, CaseJournal, follow_up, read_crashes

    options = {"workdir": str(tmp_path / "work")}
    folder = tmp_path / "work" / "journal"
    task = CheckTask("verify.x.y.float32", "x", CHECK_TARGET, 600.0, CheckContext(verb="verify", options=options))
    journal = CaseJournal.open(options)
    case = Case.make({"N": 63}, 7)
    with pytest.raises(RuntimeError):
        with journal.implementation_call(case, 3):
            resume.compile_started("token_shift_bwd_kernel_short")
            raise RuntimeError("the child dies here, inside the compile")
    assert (folder / COMPILING).is_file()
    hang = _died(returncode=1, stderr_tail="Timeout (0:05:00)!\nThread 0x1 (most recent call first):")
    assert follow_up(task, hang) is task  # resumed in a fresh child, as after a crash
    (entry,) = read_crashes(folder)
    assert entry.kind == "compile" and "token_shift_bwd_kernel_short" in entry.status
    assert "did not finish within the case limit (300 s" in entry.status
    fresh = CaseJournal.open(options)
    assert not (folder / COMPILING).exists()  # the compile the last child died in is over
    state, why = fresh.state_of(3)
    assert state == "not_judged" and why == entry.status
    assert fresh.stalled_labels == {case.label()}
    resume.compile_started("another")  # a compile that raised: its post hook never ran
    with fresh.implementation_call(case, 4):
        assert not (folder / COMPILING).exists()


def test_an_out_of_memory_that_left_the_context_unusable_runs_again_then_is_not_judged(tmp_path):
    """A fresh process's first CUDA call can run out of memory while the rest of a library run fills the GPU, and
    the context then fails every call: not the implementation's crash. The case runs once more in a fresh process;
    out of memory there too, it is not judged. A sticky kernel error stays a crash."""
    from opgate.checks.base import CheckContext
    from opgate.engine.runner import CheckTask
    from opgate.verify.inputs import Case
    from opgate.verify.resume import EXIT_CONTEXT_LOST, OUT_OF_MEMORY_TRIES, CaseJournal, follow_up, read_crashes

    options = {"workdir": str(tmp_path / "work")}
    folder = tmp_path / "work" / "journal"
    task = CheckTask("verify.x.y.float32", "x", CHECK_TARGET, 600.0, CheckContext(verb="verify", options=options))
    case = Case.make({"N": 63}, 7)

    def dies_with(fault: str) -> None:  # what implementation_call leaves before its os._exit(EXIT_CONTEXT_LOST)
        journal = CaseJournal.open(options)
        journal._mark({"phase": "case", "index": 3, "case": case.to_dict(), "label": case.label(),
                       "limit_s": 300.0, "cuda_fault": fault})
        assert follow_up(task, _died(returncode=EXIT_CONTEXT_LOST, stderr_tail="AcceleratorError")) is task

    dies_with("torch: CUDA error: out of memory")
    (entry,) = read_crashes(folder)
    assert entry.kind == "out_of_memory"
    fresh = CaseJournal.open(options)
    assert fresh.state_of(3) == ("run", None) and not fresh.crashed_labels
    for _ in range(OUT_OF_MEMORY_TRIES - 1):
        dies_with("torch: CUDA error: out of memory")
    state, why = CaseJournal.open(options).state_of(3)
    assert state == "not_judged" and "out of GPU memory 2 times" in why and "not shown to be" in why
    dies_with("torch: CUDA error: an illegal memory access was encountered")
    assert read_crashes(folder)[-1].kind == "crash"


def test_an_out_of_memory_death_on_a_gpu_runs_again_with_the_gpu_to_itself(tmp_path):
    """Its second try is an exclusive task: after the side-by-side work, with idle workers ended for memory."""
    import dataclasses

    from opgate.checks.base import CheckContext
    from opgate.engine.runner import CheckTask
    from opgate.verify.inputs import Case
    from opgate.verify.resume import EXIT_CONTEXT_LOST, CaseJournal, follow_up

    options = {"workdir": str(tmp_path / "work")}
    task = CheckTask("verify.x.y.float32", "x", CHECK_TARGET, 600.0, CheckContext(verb="verify", options=options),
                     uses_gpu=True)
    case = Case.make({"N": 63}, 7)
    CaseJournal.open(options)._mark({"phase": "case", "index": 3, "case": case.to_dict(), "label": case.label(),
                                     "limit_s": 300.0, "cuda_fault": "torch: CUDA error: out of memory"})
    again = follow_up(task, _died(returncode=EXIT_CONTEXT_LOST, stderr_tail="AcceleratorError"))
    assert again == dataclasses.replace(task, exclusive=True)


def _not_judged_beside_others(*events: dict) -> CheckResult:
    return CheckResult("verify.x.y.float32", "x", Outcome.ERROR, "could not judge: 2/58 case(s) not judged",
                       extra={"out_of_memory": list(events)})


def test_cases_out_of_memory_beside_others_run_again_alone_with_the_rest_kept(tmp_path):
    """A numerics check that could not judge cases because other processes held the GPU's memory (in a library run,
    mostly the run's own: FlagGems' skip_layer_norm on an H100, forty-seventh session) runs again as an exclusive
    task; only those cases' records are dropped from its journal, so the rest is not run again. Once alone, or
    without a GPU, its result stands."""
    import dataclasses

    from opgate.checks.base import CheckContext
    from opgate.engine.runner import CheckTask
    from opgate.verify.resume import cases_out_of_memory_beside_others, follow_up

    options = {"workdir": str(tmp_path / "work")}
    done = tmp_path / "work" / "journal" / "done"
    done.mkdir(parents=True)
    for index in range(6):
        (done / f"{index:05d}.pkl").write_bytes(b"record")
    task = CheckTask("verify.x.y.float32", "x", CHECK_TARGET, 600.0, CheckContext(verb="verify", options=options),
                     uses_gpu=True)
    result = _not_judged_beside_others(
        {"case": "N=65537", "index": 3, "retry": "out of memory again", "cause": "others"},
        {"case": "N=65536", "index": 5, "retry": "out of memory again", "cause": "others"},
        {"case": "N=4096", "index": 1, "retry": "ran: the case was judged"},  # the retry passed
        {"case": "shrunk", "index": None, "retry": "out of memory again", "cause": "others"},  # beyond the plan
        {"case": "N=2", "index": 2, "retry": "out of memory again", "cause": "unmeasured"})
    assert cases_out_of_memory_beside_others(result) == [3, 5]
    assert follow_up(task, result) == dataclasses.replace(task, exclusive=True)
    assert sorted(path.name for path in done.iterdir()) == ["00000.pkl", "00001.pkl", "00002.pkl", "00004.pkl"]
    alone = dataclasses.replace(task, exclusive=True)
    # exclusive already: once more with every idle worker ended first, and then the error stands
    assert follow_up(alone, result) == dataclasses.replace(task, exclusive=True, gpu_alone=True)
    emptied = dataclasses.replace(task, exclusive=True, gpu_alone=True)
    assert follow_up(emptied, result) is result
    assert follow_up(dataclasses.replace(task, uses_gpu=False), result) is result
    assert cases_out_of_memory_beside_others(_not_judged_beside_others()) == []


def test_a_measurement_that_ran_out_of_memory_beside_idle_workers_runs_again_once_with_the_gpu_emptied():
    """A runtime check could not time fla's cross-entropy at M=8192, V=256000 while 48 idle warm workers' CUDA
    contexts held 27 GiB of an H100 (fiftieth session): the runner ended idle workers only until half the card was
    free. Its result names what others held; the follow-up runs it again with CheckTask.gpu_alone, once."""
    import dataclasses

    from opgate.checks.base import CheckContext
    from opgate.engine.runner import CheckTask
    from opgate.gpu.judge.oom import BESIDE_OTHERS_KEY
    from opgate.verify.resume import NotedFollowUps, follow_up

    task = CheckTask("verify.x.y.float32.runtime", "x", "opgate.verify.runtime:VerifyRuntimeCheck", 300.0,
                     CheckContext(verb="verify", options={}), exclusive=True, uses_gpu=True)
    beside = CheckResult(task.check_id, "x", Outcome.ERROR, "M=8192,V=256000 float32 ran out of memory while other "
                         "processes held 27.1 of the GPU's 79.2 GiB", extra={BESIDE_OTHERS_KEY: 27.1})
    assert follow_up(task, beside) == dataclasses.replace(task, gpu_alone=True)
    assert follow_up(dataclasses.replace(task, gpu_alone=True), beside) is beside  # emptied already: it stands
    noted = NotedFollowUps()  # the engine's hook: the same, noting each task run again and why
    assert noted(task, beside) == dataclasses.replace(task, gpu_alone=True)
    assert noted(dataclasses.replace(task, gpu_alone=True), beside) is beside
    assert noted.run_again == {task.check_id: ["with every idle worker ended first (out of memory beside them)"]}
    other_error = CheckResult(task.check_id, "x", Outcome.ERROR, "an exception in opgate", extra={})
    assert follow_up(task, other_error) is other_error
    side_by_side = dataclasses.replace(task, exclusive=False)  # not a measurement: its own path, not this one
    assert follow_up(side_by_side, beside) is beside


def test_a_case_whose_process_ran_out_of_memory_is_judged_in_a_fresh_one_not_a_crash(tmp_path):
    """End to end: each case of size 63 runs out of memory once (the context unusable), then passes in the next
    process; twice is the unit test's not-judged case above."""
    spec = DATA / "oom_context_spec.py"
    proc = run_cli(str(spec), "--jobs", "2", "--json", str(tmp_path / "r.json"),
                   env={"OOM_MARKS": str(tmp_path / "marks"), "OOM_TIMES": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    result = next(r for r in report["results"] if r["check_id"] == "verify.double.out_of_memory.float32")
    assert result["outcome"] == "passed", result["reason"]
    assert "crashes" not in result["extra"] and result["extra"]["failure_class"] == ""
    assert all(row["passed"] for row in result["extra"]["cases"])
    assert [path.read_text() for path in (tmp_path / "marks").iterdir()] == ["1"] * len(crash_cases())
    # the report says which tasks ran again, and why (their first tries leave no result)
    again = report["extra"]["engine"]["run_again"]["verify.double.out_of_memory.float32"]
    assert again and set(again) == {"in a fresh process (its process died or lost its CUDA context)"}


@pytest.mark.slow
def test_a_compile_that_never_finishes_is_a_compile_time_warning_and_the_rest_is_judged(tmp_path):
    spec = DATA / "compile_stall_spec.py"
    proc = run_cli(str(spec), "--case-timeout", "3", "--jobs", "2", "--json", str(tmp_path / "r.json"))
    report = json.loads((tmp_path / "r.json").read_text())
    result = next(r for r in report["results"] if r["check_id"] == "verify.double.compile_stalls.float32")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]  # a warning, not a failure
    assert result["outcome"] == "warned" and result["extra"]["failure_class"] == "compile_time", result["reason"]
    assert "planted_kernel did not finish within the case limit (3 s" in result["reason"]
    stalled = [row for row in result["extra"]["cases"] if row.get("not_judged")]
    assert stalled and all("63" in row["case"] for row in stalled)
    assert all(row["passed"] for row in result["extra"]["cases"] if not row.get("not_judged"))
    assert "crashes" not in result["extra"]


def test_tritons_jit_hooks_mark_the_compile_while_it_runs(tmp_path):
    """backends/triton_backend.record_compiles installs the hooks that mark a compile for the journal."""
    from types import SimpleNamespace

    knobs = pytest.importorskip("triton").knobs
    from opgate.verify import resume
    from opgate.verify.backends.triton_backend import record_compiles
    from opgate.verify.resume import COMPILING, CaseJournal

    saved = (knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook)
    try:
        CaseJournal(tmp_path, 300.0)
        record = record_compiles()
        kernel = SimpleNamespace(name="softmax_kernel")
        knobs.runtime.jit_cache_hook(key="k", fn=kernel)
        assert json.loads((tmp_path / COMPILING).read_text())["kernel"] == "softmax_kernel"
        knobs.runtime.jit_post_compile_hook(key="k", fn=kernel)
        assert not (tmp_path / COMPILING).exists() and record["compiles"] == 1
        assert record["slowest"]["kernel"] == "softmax_kernel" and record["slowest"]["seconds"] >= 0.0
        wide = SimpleNamespace(name="wide_kernel")
        knobs.runtime.jit_cache_hook(key="w", fn=wide)
        time.sleep(0.05)
        knobs.runtime.jit_post_compile_hook(key="w", fn=wide)
        assert record["slowest"]["kernel"] == "wide_kernel"  # the longest single compile is kept
    finally:
        knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = saved
        resume._OPEN_JOURNAL["folder"] = None


def test_the_same_hooks_make_a_pausable_task_quiet_and_its_compile_time_leaves_out_a_window(tmp_path, monkeypatch):
    """One pair of jit hooks serves the journal and the measurement windows (engine/gpu_pause.py): inside a compile
    the task is quiet; after it, while a window is open, the post hook waits, and the compile's recorded time is taken
    before that wait. A closed journal (its check over) is written no more by a warm worker's next task."""
    import threading
    from types import SimpleNamespace

    knobs = pytest.importorskip("triton").knobs
    from opgate.engine import gpu_pause
    from opgate.verify.backends.triton_backend import record_compiles
    from opgate.verify.resume import COMPILING, CaseJournal

    pauses = tmp_path / "pause"
    monkeypatch.setenv(gpu_pause.PAUSE_DIR_ENV, str(pauses))
    monkeypatch.setitem(gpu_pause._STATE, "paused_s", 0.0)  # this process's pauses: given back after the test
    saved = (knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook)
    journal = CaseJournal(tmp_path / "journal", 300.0)
    try:
        gpu_pause.begin_task(True)
        record = record_compiles()
        kernel = SimpleNamespace(name="chunk_kernel")
        knobs.runtime.jit_cache_hook(key="k", fn=kernel)
        quiet = gpu_pause.quiet_marker(pauses, os.getpid())
        assert quiet.read_text() == gpu_pause.COMPILING and (journal.folder / COMPILING).is_file()
        gpu_pause.flag_path(pauses).write_text("1")  # a window is asked for while the compile runs
        threading.Timer(0.5, gpu_pause.flag_path(pauses).unlink).start()  # ... and closes half a second later
        began = time.perf_counter()
        knobs.runtime.jit_post_compile_hook(key="k", fn=kernel)
        assert time.perf_counter() - began >= 0.4  # it waited for the window
        assert record["seconds"] < 0.4 and gpu_pause.paused_seconds() >= 0.4  # not counted as the compile's time
        assert not quiet.exists() and not (journal.folder / COMPILING).exists()
        journal.close()
        knobs.runtime.jit_cache_hook(key="n", fn=kernel)  # the worker's next task compiles
        assert not (journal.folder / COMPILING).exists()
        knobs.runtime.jit_post_compile_hook(key="n", fn=kernel)
    finally:
        knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = saved
        gpu_pause.end_task()
        journal.close()


def test_after_the_last_restart_for_hung_compiles_the_cases_left_are_counted_not_run(tmp_path):
    from opgate.verify.inputs import Case
    from opgate.verify.resume import CaseJournal, CrashEntry

    folder = tmp_path / "journal"
    folder.mkdir()
    stalls = [CrashEntry(k, "case", Case.make({"N": 63 + k}, k).to_dict(), Case.make({"N": 63 + k}, k).label(),
                         "its JIT compile of kernel k did not finish within the case limit (300 s; ...)", "",
                         "compile").to_dict() for k in range(MAX_CRASHES)]
    (folder / "crashes.json").write_text(json.dumps({"crashes": stalls, "stop": True}))
    journal = CaseJournal(folder, 300.0)
    passed = CheckResult("verify.x.y.float32", "x", Outcome.PASSED, "2/2 cases within budget")
    annotated = journal.annotate(passed, planned=8, judged=2, token_for=lambda case: "t", spec_name="s.py")
    assert "3 case(s) not run" in annotated.reason and "crashes" not in annotated.extra
    more = CaseJournal(folder, 300.0)
    more.stopped = False
    assert more.annotate(passed, planned=8, judged=2, token_for=lambda case: "t", spec_name="s.py") is passed


def test_a_warm_up_killed_inside_a_compile_says_which_kernel_it_was_compiling(tmp_path, monkeypatch):
    """attorch's NLL loss at S = 65536: its warm-up's first call ran Triton's autotuner over every config, a
    65536-wide block in one warp among them, past the 300 s timeout, reported only as "timed out" (thirty-seventh
    session). The warm-up marks its compiles beside its work count; the runner's follow-up names the kernel."""
    from opgate.checks.base import CheckContext
    from opgate.engine.runner import CheckTask
    from opgate.verify import resume
    from opgate.verify.resume import COMPILING, WARM_UP_TARGET, compiles_marked, follow_up, warm_up_folder

    monkeypatch.setitem(resume._OPEN_JOURNAL, "folder", None)  # no check's journal open in this worker
    options = {"work_count_path": str(tmp_path / "work_counts" / "nll.float32.json"), "impl": "attorch_nll_loss"}
    folder = warm_up_folder(options)
    task = CheckTask("verify.nll.attorch_nll_loss.float32.runtime_warm_up", "x", WARM_UP_TARGET, 300.0,
                     CheckContext(verb="verify", options=options))
    timed_out = _died(timeout_s=300.0)
    with compiles_marked(folder):
        resume.compile_started("other_kernel")
        resume.compile_finished()  # a compile that ended leaves no mark
    assert follow_up(task, timed_out) is timed_out
    with compiles_marked(folder):
        resume.compile_started("nll_loss_forward_kernel")  # the worker is killed here: the mark stays
    assert (folder / COMPILING).is_file()
    said = follow_up(task, timed_out)
    assert said.outcome is Outcome.ERROR and "while Triton compiled kernel nll_loss_forward_kernel" in said.reason
    assert said.extra["compiling"]["kernel"] == "nll_loss_forward_kernel" and "autotuner" in said.remediation
    crashed = _died(returncode=-11)  # not a timeout: the runner's words stand
    assert follow_up(task, crashed) is crashed


def test_a_warm_up_marks_nothing_inside_an_open_check_journal(tmp_path, monkeypatch):
    from opgate.verify import resume
    from opgate.verify.resume import COMPILING, CaseJournal, compiles_marked

    monkeypatch.setitem(resume._OPEN_JOURNAL, "folder", None)
    journal = CaseJournal.open({"workdir": str(tmp_path / "work")})
    try:
        with compiles_marked(tmp_path / "warm_up"):
            resume.compile_started("k")
        assert (tmp_path / "work" / "journal" / COMPILING).is_file()
        assert not (tmp_path / "warm_up" / COMPILING).exists()
    finally:
        resume.compile_finished()
        journal.close()


def _journal_with_crashes(tmp_path, count: int):
    import json as _json

    from opgate.verify.inputs import Case
    from opgate.verify.resume import CaseJournal, CrashEntry

    folder = tmp_path / "work" / "journal"
    folder.mkdir(parents=True)
    entries = [CrashEntry(k, "case", Case.make({"L": 0}, k).to_dict(), Case.make({"L": 0}, k).label(),
                          "killed its process with SIGSEGV", "").to_dict() for k in range(count)]
    (folder / "crashes.json").write_text(_json.dumps({"crashes": entries, "stop": count >= MAX_CRASHES}))
    return CaseJournal.open({"workdir": str(tmp_path / "work")})


def test_cases_the_time_budget_capped_are_not_counted_as_stopped_by_crashes(tmp_path):
    """mamba-ssm's chunk scan crashed on one case (L=0) and the CPU budget capped 34-77 others: the report said
    those "not run: opgate stops restarting an implementation after 3 crashes", twice counted and wrongly blamed."""
    journal = _journal_with_crashes(tmp_path, 1)
    capped = {"budget_s": 18.8, "capped": [{"case": f"c{k}", "predicted_s": 4.0} for k in range(5)],
              "reason": "5 case(s) not run: they did not fit the 18.8 s time budget"}
    result = CheckResult("verify.x.y.float32", "x", Outcome.WARNED, "ok; 5 case(s) not run: they did not fit",
                         extra={"time_budget": capped})
    merged = journal.annotate(result, planned=10, judged=4, token_for=lambda case: "ogv1.x", spec_name="s.py")
    assert merged.outcome is Outcome.FAILED and merged.extra["cases_not_run"] == 0
    assert "stops restarting" not in merged.reason
    assert merged.reason.endswith("; 5 case(s) not run: they did not fit the 18.8 s time budget")  # still said
    assert not any(f.name == "cases not run" for f in merged.figures)


def test_after_the_crash_bound_the_cases_left_are_counted_as_not_run(tmp_path):
    journal = _journal_with_crashes(tmp_path, MAX_CRASHES)
    result = CheckResult("verify.x.y.float32", "x", Outcome.PASSED, "ok")
    merged = journal.annotate(result, planned=10, judged=4, token_for=lambda case: "ogv1.x", spec_name="s.py")
    assert merged.extra["cases_not_run"] == 10 - 4 - MAX_CRASHES
    assert f"{10 - 4 - MAX_CRASHES} case(s) not run: opgate stops restarting" in merged.reason
