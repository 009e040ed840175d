"""The sanitizer stage's pieces that need no GPU: which sizes it runs, the options and environment it gives
the sanitized child, and how findings become a reason naming kernel, address, thread, block and size.
Reports are the H200's recorded logs (tests/data/sanitizer/h200) and documented-format samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests_verify_support import DATA, ROOT, SRC, gpu_reason

from opgate.gpu.probes.sanitizer import parse_sanitizer_output
from opgate.verify import runtime
from opgate.verify.tasks import GpuStagePayload
from opgate.core.spec import load_spec_file

SAMPLES = ROOT / "tests" / "data" / "sanitizer"
PLANTED = DATA / "planted_memory.py"


def parse(name: str):
    return parse_sanitizer_output((SAMPLES / name).read_text(), "memcheck")


def test_the_stage_runs_the_first_declared_sizes_then_a_tail_one_past_a_power_of_two():
    op = load_spec_file(PLANTED)[0]
    assert runtime.sanitized_sizes(op) == [("first declared", {"M": 4, "N": 256}), ("tail", {"M": 4, "N": 257})]
    softmax = load_spec_file(DATA / "softmax_spec.py")[0]
    assert runtime.tail_dims(softmax) == {"M": 2, "N": 129}


def test_no_tail_when_every_dim_is_exact():
    import opgate

    op = opgate.Operator("fixed", reference=lambda x: x, inputs=[opgate.TensorSpec("x", ("N",))],
                         dims={"N": [100]}, exact_dims=["N"])
    assert runtime.tail_dims(op) is None and [s for s, _ in runtime.sanitized_sizes(op)] == ["first declared"]


def test_memcheck_tracks_stream_ordered_races_and_the_child_runs_with_the_caches_off():
    assert ("--track-stream-ordered-races", "all") in runtime.SANITIZER_TOOL_OPTIONS["memcheck"]
    # a read just past the end at the tail size would otherwise land in the next allocation (H200, 2026-12-01)
    assert ("--padding", "65536") in runtime.SANITIZER_TOOL_OPTIONS["memcheck"]
    assert runtime.SANITIZER_CHILD_ENV == {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    command = runtime.run_once_command(GpuStagePayload(spec_file="s.py", op="o", impl="i", dtype="float32"),
                                       sanitized=True)
    assert command[-1] == "--sanitized" and command[1:3] == ["-m", "opgate.verify.runtime"]


def test_python_frames_of_the_host_backtrace_are_kept():
    report = parse("h200/oob_write.bug.memcheck.log")
    first = report.findings[0]
    assert first.python_frames == ("run_oob_write in planted.py:170", "main in planted.py:287")
    assert not any("Host Frame" in d for d in first.details)


def test_the_reason_names_kernel_address_thread_block_and_the_launching_line():
    text = runtime.describe_findings(parse("h200/oob_write.bug.memcheck.log").findings)
    assert text.startswith("invalid access (write of 4 bytes) in planted_oob_write (")
    assert "at 0x7f54e2800fa0 (is out of bounds and is 1 bytes after the nearest allocation" in text
    assert "thread (232,0,0) block (3,0,0)" in text
    assert "launched from run_oob_write in planted.py:170" in text
    assert "reports like it]" in text


def test_a_hardware_exception_without_an_address_still_names_thread_and_block():
    text = runtime.describe_findings(parse("h200/free_async_race.bug.memcheck.log").findings)
    assert "in planted_freed_reader" in text and "hardware exception: illegal address" in text
    assert "thread (32,0,0) block (8,0,0)" in text


def test_findings_are_attributed_to_the_size_whose_call_launched_them():
    findings = parse("memcheck_tail_step.log").findings
    assert [runtime.finding_steps(f) for f in findings] == [["tail"], ["tail"]]
    sizes = [("first declared", {"M": 4, "N": 256}), ("tail", {"M": 4, "N": 257})]
    stdout = "\n".join(runtime.STEP_MARKER + json.dumps({"event": event, "step": step, "dims": dims})
                       for step, dims in sizes for event in ("start", "done"))
    where = runtime.where_in_steps(findings, sizes, runtime.sanitized_steps_reached(stdout), stdout)
    assert where == " at the tail size M=4,N=257 (the first declared size ran clean)"
    assert "launched from _launch in planted_memory.py:77" in runtime.describe_findings(findings)


def test_without_python_frames_the_step_the_run_stopped_in_is_named():
    findings = parse("h200/oob_write.bug.memcheck.log").findings  # frames, but not the sanitized child's
    sizes = [("first declared", {"N": 256}), ("tail", {"N": 257})]
    stdout = runtime.STEP_MARKER + json.dumps({"event": "start", "step": "first declared", "dims": {"N": 256}})
    where = runtime.where_in_steps(findings, sizes, runtime.sanitized_steps_reached(stdout), stdout)
    assert where == " at the first declared size N=256 (the run stopped there)"


# -- on a GPU -----------------------------------------------------------------------------------------------

def _verify(spec: Path, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run([sys.executable, "-m", "opgate", "verify", str(spec), "--budget", "quick", "--no-extras",
                           "--json", str(tmp_path / "r.json"), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    report = json.loads((tmp_path / "r.json").read_text())
    return proc, {r["check_id"]: r for r in report["results"]}


@pytest.mark.gpu
def test_planted_memory_bugs_are_caught_and_their_twins_pass(tmp_path):
    if gpu_reason():
        pytest.skip(gpu_reason())
    pytest.importorskip("cupy")
    sys.path.insert(0, str(DATA))
    from planted_memory import PLANTED as KINDS

    proc, results = _verify(PLANTED, tmp_path, "--stages", "numerics,sanitizer", "--sanitizer-tools", "memcheck",
                            "--jobs", "8")
    for impl, kind in KINDS.items():
        result = results[f"verify.double.{impl}.sanitizer"]
        if result["outcome"] == "skipped":
            pytest.skip(result["reason"])
        expected = "failed" if kind == "bug" else "passed"
        assert result["outcome"] == expected, (impl, result["reason"])
        if kind == "bug":
            assert result["extra"]["failure_class"] == "memory"
    assert "at the tail size" in results["verify.double.tail_oob_read.sanitizer"]["reason"]


@pytest.mark.gpu
def test_a_sticky_cuda_error_on_one_case_is_a_crash_of_that_case(tmp_path):
    if gpu_reason():
        pytest.skip(gpu_reason())
    pytest.importorskip("cupy")
    proc, results = _verify(DATA / "gpu_crash_spec.py", tmp_path, "--stages", "numerics")
    assert proc.returncode == 1, proc.stdout[-3000:]
    crashed = results["verify.double.sticky_error.float32"]
    assert crashed["outcome"] == "failed" and crashed["extra"]["failure_class"] == "crash"
    assert "left the CUDA context unusable" in crashed["extra"]["crashes"][0]["status"]
    assert crashed["extra"]["cases_judged"] == crashed["extra"]["cases_planned"] - len(crashed["extra"]["crashes"])
    twin = results["verify.double.sticky_error_twin.float32"]
    # CuPy's NVRTC build flushes subnormals: the twin is correct apart from the documented `ftz` deviation
    assert twin["outcome"] in ("passed", "warned"), twin["reason"]
    assert all(d["class"] == "ftz" for d in twin["extra"].get("deviations", [])), twin["reason"]
    if twin["outcome"] == "warned":
        assert twin["extra"]["deviations"], twin["reason"]


def test_declared_empty_sizes_are_skipped_for_the_sanitizer():
    import opgate

    op = opgate.Operator("e", reference=lambda x: x, inputs=[opgate.TensorSpec("x", ("M", "N"))],
                         dims={"M": [0, 8], "N": [64]})
    assert runtime.sanitized_sizes(op) == [("first declared", {"M": 8, "N": 64}), ("tail", {"M": 8, "N": 65})]


def test_sanitizer_children_yield_the_cpu_and_a_library_calibrates_with_more_processes(monkeypatch) -> None:
    """The sanitizer's children start niced (their CPU is nothing the report waits for; the calibration is), and a
    run of several spec files calibrates in half the CPUs' processes instead of a quarter."""
    from opgate.engine.worker import NICE_ENV
    from opgate.verify.builtin_stages import SANITIZER_NICE
    from opgate.verify.calibrator import calibration_processes

    child = subprocess.run([sys.executable, "-c", "import os; from opgate.engine.worker import lower_priority; "
                            "before = os.nice(0); lower_priority(); print(os.nice(0) - before)"],
                           env={**os.environ, "PYTHONPATH": str(SRC), NICE_ENV: str(SANITIZER_NICE)},
                           capture_output=True, text=True, check=True)
    assert int(child.stdout) == SANITIZER_NICE or os.nice(0) + SANITIZER_NICE > 19
    monkeypatch.delenv("OPGATE_CALIBRATION_PROCESSES", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert calibration_processes(1 << 16) == 4 and calibration_processes(1 << 16, library=True) == 8
    assert calibration_processes(3, library=True) == 3
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert calibration_processes(1 << 16, library=True) == 0
