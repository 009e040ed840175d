"""A compute-sanitizer run killed by a signal with no error in its log is run once more (verify/runtime.py
VerifySanitizerCheck): on an H100 one racecheck run of a library's 464 died by SIGSEGV before the program's first
call, and the same command ran clean in the next run (forty-third session). The retry's verdict stands and says
what happened; a second crash is an error that names the signal, never a pass. The sanitizer here is a stand-in
executable run through the real subprocess path (no GPU: the crash cannot be provoked on purpose)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests_verify_support import ROOT

from opgate.checks.base import CheckContext
from opgate.model.results import Outcome
from opgate.verify.tasks import GpuStagePayload

SOFTMAX = ROOT / "examples" / "ops" / "softmax.py"
# Counts its calls beside itself; the first CRASHES of them end by the signal SIGNAL, the first OOM_RUNS write a log
# whose only error is a cudaMalloc out of memory (as memcheck reports an API error) and exit with --error-exitcode,
# the others exit as EXIT says.
STAND_IN = """#!/bin/sh
calls="$(dirname "$0")/calls"
echo call >> "$calls"
n="$(wc -l < "$calls")"
if [ "$n" -le "$CRASHES" ]; then kill -"$SIGNAL" $$; fi
if [ "$n" -le "${OOM_RUNS:-0}" ]; then
  while [ $# -gt 0 ]; do
    case "$1" in --log-file) log="$2"; shift ;; --error-exitcode) code="$2"; shift ;; esac
    shift
  done
  printf '%s\\n' '========= COMPUTE-SANITIZER' \
    '========= Program hit cudaErrorMemoryAllocation (error 2) due to "out of memory" on CUDA API call to cudaMalloc.' \
    '=========     Saved host backtrace up to driver entry point at error' \
    '========= ERROR SUMMARY: 1 error' > "$log"
  exit "$code"
fi
exit "$EXIT"
"""


def _sanitizer_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crashes: int, exit_code: int = 0,
                     sig: str = "SEGV", out_of_memory_runs: int = 0) -> tuple[object, int]:
    from opgate.gpu.probes import sanitizer as sanitizer_probe
    from opgate.verify import runtime
    from opgate.verify.loaded_specs import loaded_operators

    tool = tmp_path / "compute-sanitizer"
    tool.write_text(STAND_IN)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv(sanitizer_probe.SANITIZER_ENV, str(tool))
    monkeypatch.setenv("CRASHES", str(crashes))
    monkeypatch.setenv("SIGNAL", sig)
    monkeypatch.setenv("EXIT", str(exit_code))
    monkeypatch.setenv("OOM_RUNS", str(out_of_memory_runs))
    monkeypatch.setattr(sanitizer_probe, "supported_tool_options", lambda path, options: ([], []))
    monkeypatch.setattr(runtime, "_require_cuda", lambda: None)
    op = next(o for o in loaded_operators(str(SOFTMAX)) if o.name == "softmax")
    monkeypatch.setattr(runtime, "load_implementation", lambda ref: (op, op.implementations["torch"]))
    payload = GpuStagePayload(spec_file=str(SOFTMAX), op="softmax", impl="torch", dtype="float32",
                              tool="racecheck", artefact_dir=str(tmp_path / "artefacts"))
    result = runtime.VerifySanitizerCheck().evaluate(CheckContext(verb="verify", options=payload.to_dict()))
    return result, len((tmp_path / "calls").read_text().splitlines())


def test_a_run_that_ends_cleanly_runs_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, calls = _sanitizer_check(tmp_path, monkeypatch, crashes=0)
    assert (result.outcome, calls) == (Outcome.PASSED, 1), result.reason
    assert "run again" not in result.reason and "first_run_crashed" not in result.extra


def test_one_crash_with_no_finding_is_run_again_and_the_clean_second_run_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, calls = _sanitizer_check(tmp_path, monkeypatch, crashes=1)
    assert (result.outcome, calls) == (Outcome.PASSED, 2), result.reason
    assert ("a first run was killed by signal 11 (SIGSEGV) before its first call with no error in its log and "
            "was run again") in result.reason
    assert result.extra["first_run_crashed"]["returncode"] == -11
    assert result.extra["sanitizer"]["returncode"] == 0
    assert (tmp_path / "artefacts" / "sanitizer-racecheck-again.log").parent.is_dir()
    assert {f.key: f.value for f in result.figures}["verify.sanitizer.runs_under_the_sanitizer"] == 2


def test_two_crashes_are_an_error_naming_the_signal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, calls = _sanitizer_check(tmp_path, monkeypatch, crashes=2)
    assert (result.outcome, calls) == (Outcome.ERROR, 2), result.reason
    assert result.reason.startswith("the run under racecheck was killed by signal 11 (SIGSEGV) before its first "
                                    "call; a first run was killed by signal 11 (SIGSEGV)")
    assert "this second run too" in result.reason and "by hand" in result.remediation


def test_an_exit_code_is_not_run_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exit code comes from the program (an exception, sys.exit): the same again, so no second run."""
    result, calls = _sanitizer_check(tmp_path, monkeypatch, crashes=0, exit_code=3)
    assert (result.outcome, calls) == (Outcome.ERROR, 1), result.reason
    assert result.reason.startswith("the run under racecheck exited with code 3 before its first call")


def test_a_log_whose_only_errors_are_allocations_out_of_memory_is_run_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the allocator's caches off every tensor is a cudaMalloc, and beside a library run's other processes one
    can find the GPU full: memcheck reports that as an API error, which says nothing of the code's memory safety."""
    result, calls = _sanitizer_check(tmp_path, monkeypatch, crashes=0, out_of_memory_runs=1)
    assert (result.outcome, calls) == (Outcome.PASSED, 2), result.reason
    assert ("a first run found only 1 CUDA API call(s) out of device memory (cudaMalloc: cudaErrorMemoryAllocation) "
            "and was run again") in result.reason
    assert result.extra["first_run_out_of_memory"]["findings"][0]["cuda_error"] == 2


def test_out_of_memory_in_both_runs_is_no_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, calls = _sanitizer_check(tmp_path, monkeypatch, crashes=0, out_of_memory_runs=2)
    assert (result.outcome, calls) == (Outcome.ERROR, 2), result.reason
    assert result.reason.startswith("could not judge under racecheck: both runs' only errors were 1 CUDA API call(s) "
                                    "out of device memory")
    assert "Not a finding" in result.remediation
