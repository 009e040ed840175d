"""One compute-sanitizer run per spec file and tool (verify/sanitizer_batch.py): how tasks are grouped, when a
shared run counts (clean only), and the verdict a member reads from it; on a GPU, softmax's two implementations
under one run per tool, and planted bugs still attributed one by one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests_verify_support import ROOT, SRC, gpu_reason

from opgate.checks.base import CheckContext
from opgate.model.results import Outcome
from opgate.engine.runner import CheckTask
from opgate.verify import sanitizer_batch
from opgate.verify.runtime import VerifySanitizerCheck
from opgate.verify.tasks import GpuStagePayload


def _task(spec: str, op: str, impl: str, tool: str, target: str = sanitizer_batch.SANITIZER_TARGET) -> CheckTask:
    payload = GpuStagePayload(spec_file=spec, op=op, impl=impl, dtype="float32", tool=tool)
    return CheckTask(f"verify.{op}.{impl}.{tool}", op, target, 480.0,
                     CheckContext(verb="verify", options=payload.to_dict()))


def test_the_sanitizer_tasks_of_one_spec_file_and_tool_share_one_run(tmp_path: Path) -> None:
    tasks = [_task("/a.py", "x", "triton", "memcheck"), _task("/a.py", "y", "triton", "memcheck"),
             _task("/a.py", "x", "triton", "racecheck"), _task("/b.py", "z", "triton", "memcheck"),
             _task("/a.py", "y", "cuda", "memcheck"), _task("/a.py", "x", "triton", "", target="m:Numerics")]
    grouped = sanitizer_batch.group_sanitizer_tasks(tasks, tmp_path)
    first, second, alone_tool, alone_file, third, other = grouped
    assert [m["op"] + "." + m["impl"] for m in first.context.options["group"]] == ["x.triton", "y.triton", "y.cuda"]
    assert first.timeout_s == 2 * 480.0 and first.after == ()
    for member in (second, third):
        assert member.after == (first.check_id,) and member.context.options["group"] == []
        assert member.context.options["group_dir"] == first.context.options["group_dir"]
    assert (alone_tool, alone_file, other) == (tasks[2], tasks[3], tasks[5])  # groups of one are left alone


def test_racecheck_shares_its_runs_in_chunks_and_the_other_tools_do_not(tmp_path: Path) -> None:
    """racecheck's calls cost tens of seconds each on the host: a file's nine implementations run as three shared
    runs of three side by side; memcheck's nine share one."""
    ops = [f"op{k}" for k in range(9)]
    tasks = [_task("/a.py", op, "triton", tool) for tool in ("racecheck", "memcheck") for op in ops]
    grouped = sanitizer_batch.group_sanitizer_tasks(tasks, tmp_path)
    firsts = [t for t in grouped if t.context.options["group"]]
    assert [[m["op"] for m in t.context.options["group"]] for t in firsts] == [
        ops[0:3], ops[3:6], ops[6:9], ops]
    assert len({t.context.options["group_dir"] for t in firsts}) == 4
    for task in grouped:
        if not task.context.options["group"]:
            first = next(f for f in firsts if f.context.options["group_dir"] == task.context.options["group_dir"])
            assert task.after == (first.check_id,)
            assert task.context.options["op"] in [m["op"] for m in first.context.options["group"]]


def _run(findings: int = 0, returncode: int = 0, timed_out: bool = False) -> SimpleNamespace:
    report = SimpleNamespace(findings=[object()] * findings, reported_error_count=findings)
    return SimpleNamespace(duration_s=12.5, log_path="/tmp/log", timed_out=timed_out, returncode=returncode,
                           report=report, sanitizer_flagged=findings > 0)


MEMBERS = [{"op": "x", "impl": "triton", "dtype": "float32"}, {"op": "y", "impl": "triton", "dtype": "float16"}]


def _progress(path: Path, finished: int) -> Path:
    lines = []
    for member in MEMBERS[:finished]:
        key = sanitizer_batch.Member(**member).key()
        lines += [{"event": "step", "member": key, "step": "first declared", "dims": {"N": 256}},
                  {"event": "step", "member": key, "step": "tail", "dims": {"N": 257}},
                  {"event": "done", "member": key}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"event": "st')  # a cut-short line
    return path


@pytest.mark.parametrize("run, finished, why", [
    (_run(), 2, ""),
    (_run(findings=1, returncode=86), 2, "has findings"),
    (_run(returncode=1), 1, "exited with code 1"),
    (_run(returncode=-11), 2, "was killed by signal 11 (SIGSEGV)"),
    (_run(timed_out=True, returncode=None), 1, "timed out"),
    (_run(), 1, "did not finish y|triton|float16"),
])
def test_only_a_clean_shared_run_covers_its_members(tmp_path: Path, run: SimpleNamespace, finished: int,
                                                    why: str) -> None:
    record = sanitizer_batch.judge_shared_run(run, MEMBERS, _progress(tmp_path / "p.jsonl", finished))
    assert record["clean"] is (why == "") and why in record["why"]
    (tmp_path / sanitizer_batch.RECORD).write_text(json.dumps(record))
    seen = sanitizer_batch.shared_record(str(tmp_path), sanitizer_batch.Member("x", "triton", "float32"))
    assert (seen is not None) is (why == "")
    if seen is not None:
        assert seen["member_steps"] == [["first declared", {"N": 256}], ["tail", {"N": 257}]]


def test_a_member_reads_a_clean_shared_run_without_a_gpu_and_runs_alone_without_one(tmp_path: Path) -> None:
    (tmp_path / sanitizer_batch.RECORD).write_text(json.dumps(
        sanitizer_batch.judge_shared_run(_run(), MEMBERS, _progress(tmp_path / "p.jsonl", 2))))
    payload = GpuStagePayload(spec_file="/lib/ops.py", op="y", impl="triton", dtype="float16", tool="racecheck",
                              group_dir=str(tmp_path))
    result = VerifySanitizerCheck().evaluate(CheckContext(verb="verify", options=payload.to_dict()))
    assert result.outcome is Outcome.PASSED
    assert "one compute-sanitizer run of the 2 implementations of ops.py under racecheck" in result.reason
    assert "tail size N=257" in result.reason
    # no clean record: the member runs its own child (here: no GPU, so it says so instead of passing)
    (tmp_path / sanitizer_batch.RECORD).write_text(json.dumps({"clean": False, "why": "has findings"}))
    if not gpu_reason():
        pytest.skip("a GPU is present: the member would run its own child")
    from opgate.model.errors import SkipCheck

    with pytest.raises(SkipCheck):
        VerifySanitizerCheck().evaluate(CheckContext(verb="verify", options=payload.to_dict()))


def test_the_first_member_runs_the_shared_run_without_loading_torch_or_the_spec(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared run's child loads the spec itself; the check's own process loading it too cost ~14 CPU-s per
    group on the H200 host (fla's import). Here the spec file does not even exist."""
    from opgate.gpu.probes import sanitizer as sanitizer_probe
    from opgate.verify import runtime

    def shared(group_dir: Path, spec_file: str, members: list, run: object) -> dict:
        record = sanitizer_batch.judge_shared_run(_run(), members, _progress(tmp_path / "p.jsonl", 2))
        (Path(group_dir) / sanitizer_batch.RECORD).write_text(json.dumps(record))
        return record

    def refuse(*args: object) -> None:
        raise AssertionError("the shared run's first member loaded torch or the spec")

    monkeypatch.setattr(sanitizer_probe, "find_compute_sanitizer", lambda: "/usr/bin/compute-sanitizer")
    monkeypatch.setattr(sanitizer_probe, "supported_tool_options", lambda path, options: ([], []))
    monkeypatch.setattr(sanitizer_batch, "run_shared", shared)
    monkeypatch.setattr(runtime, "load_implementation", refuse)
    monkeypatch.setattr(runtime, "_require_cuda", refuse)
    payload = GpuStagePayload(spec_file="/lib/missing_ops.py", op="x", impl="triton", dtype="float32",
                              tool="memcheck", group_dir=str(tmp_path), group=MEMBERS)
    result = VerifySanitizerCheck().evaluate(CheckContext(verb="verify", options=payload.to_dict()))
    assert result.outcome is Outcome.PASSED, result.reason
    assert "one compute-sanitizer run of the 2 implementations of missing_ops.py under memcheck" in result.reason


@pytest.mark.gpu
def test_softmax_implementations_share_one_run_per_tool_and_planted_bugs_stay_their_own(tmp_path: Path) -> None:
    if gpu_reason():
        pytest.skip(gpu_reason())
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    report = tmp_path / "softmax.json"
    subprocess.run([sys.executable, "-m", "opgate", "verify", str(ROOT / "examples" / "ops" / "softmax.py"),
                    "--stages", "sanitizer", "--sanitizer-tools", "memcheck,initcheck", "--json", str(report)],
                   cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    results = [r for r in json.loads(report.read_text())["results"] if r["check_id"].endswith(("sanitizer", "initcheck"))]
    assert len(results) == 4 and all(r["outcome"] == "passed" for r in results), [r["reason"] for r in results]
    assert all(r["extra"]["shared_run"]["members"] == 2 for r in results), [r["reason"] for r in results]


def test_the_shared_child_calls_every_member_at_each_size_and_records_its_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child's own loop, on the CPU: the GPU's input copy and sync stand aside."""
    import torch

    from opgate.verify import runtime
    from opgate.verify.inputs import Case, make_inputs

    spec = ROOT / "examples" / "ops" / "softmax.py"
    calls: list[tuple[str, tuple[int, ...]]] = []
    monkeypatch.setattr(runtime, "cuda_inputs", lambda op, dims, dtype, seed, draw_on_gpu=True:
                        make_inputs(op, Case.make(dims, seed), dtype).values)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append(("sync", ())))
    monkeypatch.setattr(runtime, "disable_allocator_caches", lambda: None)  # it sets this process's environment
    real = runtime.sanitized_call_at_tail_size

    def tail(fn, args):  # type: ignore[no-untyped-def]
        calls.append(("tail", tuple(args[0].shape)))
        return real(fn, args)

    monkeypatch.setattr(runtime, "sanitized_call_at_tail_size", tail)
    members = [{"op": "softmax", "impl": "torch", "dtype": "float32"},
               {"op": "softmax", "impl": "torch", "dtype": "float16"}]
    request = tmp_path / "request.json"
    progress = tmp_path / sanitizer_batch.PROGRESS
    request.write_text(json.dumps({"spec_file": str(spec), "members": members, "progress": str(progress)}))
    sanitizer_batch.main(str(request))
    steps = sanitizer_batch.read_progress(progress)
    assert set(steps) == {"softmax|torch|float32", "softmax|torch|float16"}
    assert all(entry["done"] and [s for s, _ in entry["steps"]] == ["first declared", "tail"]
               for entry in steps.values())
    assert [c for c in calls if c[0] == "tail"] and len([c for c in calls if c[0] == "sync"]) == 4


def test_the_sanitizer_logs_go_to_the_implementations_report_folder(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A finding's evidence is its log: kept with the report's artefacts (--out), not in a temporary folder."""
    from opgate.gpu.probes import sanitizer as sanitizer_probe
    from opgate.verify import runtime

    seen: list[object] = []

    def fake_run(command: list, tool: str, **kwargs: object) -> SimpleNamespace:
        seen.append(kwargs["log_path"])
        return _run()

    def shared(group_dir: Path, spec_file: str, members: list, run) -> dict:
        run(["child"])
        record = sanitizer_batch.judge_shared_run(_run(), members, _progress(tmp_path / "p.jsonl", 2))
        (Path(group_dir) / sanitizer_batch.RECORD).write_text(json.dumps(record))
        return record

    monkeypatch.setattr(sanitizer_probe, "find_compute_sanitizer", lambda: "/usr/bin/compute-sanitizer")
    monkeypatch.setattr(sanitizer_probe, "supported_tool_options", lambda path, options: ([], []))
    monkeypatch.setattr(sanitizer_probe, "run_under_sanitizer", fake_run)
    monkeypatch.setattr(sanitizer_batch, "run_shared", shared)
    artefacts = tmp_path / "opgate-report" / "verify" / "x" / "triton" / "float32"
    payload = GpuStagePayload(spec_file="/lib/ops.py", op="x", impl="triton", dtype="float32", tool="racecheck",
                              group_dir=str(tmp_path), group=MEMBERS, artefact_dir=str(artefacts))
    result = VerifySanitizerCheck().evaluate(CheckContext(verb="verify", options=payload.to_dict()))
    assert result.outcome is Outcome.PASSED, result.reason
    assert seen == [artefacts / "sanitizer-racecheck-shared-run.log"]


def test_every_gpu_stage_task_carries_its_implementation_and_dtypes_report_folder(tmp_path: Path) -> None:
    from opgate.core.spec import load_spec_file
    from opgate.engine.stages import OperatorPlan
    from opgate.verify.backends.base import ImplementationChoice
    from opgate.verify.builtin_stages import RuntimeStage, SanitizerStage
    from tests_verify_support import ROOT

    softmax = ROOT / "examples" / "ops" / "softmax.py"
    [op] = load_spec_file(softmax)
    choice = ImplementationChoice("triton", "triton", "user")
    plan = OperatorPlan(op, [choice], ["float32", "float16"], softmax, "standard", 0, True, 2, tmp_path,
                        tmp_path / "out", 900.0, gpu_choices=[choice])
    for stage in (SanitizerStage(), RuntimeStage()):
        for task in stage.tasks(plan):
            options = task.context.options
            assert options["artefact_dir"] == str((tmp_path / "out" / "verify" / "softmax" / "triton" /
                                                   options["dtype"]).resolve())
