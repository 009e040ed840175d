"""The sanitizer runner's process plumbing and the planted-suite verdicts, without a GPU.

`compute-sanitizer` is replaced by a small stand-in script (STUB below) that records its arguments, runs
the target, writes a report sample from tests/data/sanitizer as its log and exits like the real tool
(--error-exitcode when the log reports errors). What is tested is opgate's side: the options it passes,
how it reads the log and exit code, timeouts, and how it judges a planted case from two runs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from opgate.gpu.probes import sanitizer
from opgate.gpu.probes.sanitizer import SanitizerNotFound, SanitizerRun, parse_sanitizer_output, run_under_sanitizer
from opgate_testing import DATA, data_module

CASES_BY_NAME = data_module("gpu/gpu_planted").CASES_BY_NAME
tool = data_module("gpu/gpu_sanitizer_tool")
judge_planted, python_command, run_planted_suite = tool.judge_planted, tool.python_command, tool.run_planted_suite

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "sanitizer"

STUB = r'''#!{python}
import json, os, subprocess, sys
args = sys.argv[1:]
if args and args[0] == "--help":
    print("--tool --print-limit --error-exitcode --log-file --target-processes --report-api-errors")
    sys.exit(0)
opts, i = {{}}, 0
while i < len(args) and args[i].startswith("--"):
    opts[args[i]] = args[i + 1]
    i += 2
with open(os.environ["STUB_RECORD"], "a") as record:
    record.write(json.dumps({{"options": opts, "command": args[i:]}}) + "\n")
child = subprocess.run(args[i:])
text = open(os.environ["STUB_LOG"]).read() if os.environ.get("STUB_LOG") else "========= ERROR SUMMARY: 0 errors\n"
open(opts["--log-file"], "w").write(text)
sys.exit(int(opts["--error-exitcode"]) if "ERROR SUMMARY: 0 errors" not in text else child.returncode)
'''


@pytest.fixture
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "compute-sanitizer"
    path.write_text(STUB.format(python=sys.executable))
    path.chmod(0o755)
    monkeypatch.setenv(sanitizer.SANITIZER_ENV, str(path))
    monkeypatch.setenv("STUB_RECORD", str(tmp_path / "record.jsonl"))
    sanitizer._help_text.cache_clear()
    return tmp_path


def test_runs_the_target_under_the_tool_and_parses_the_log(stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUB_LOG", str(SAMPLES / "memcheck_oob_write.log"))
    run = run_under_sanitizer([sys.executable, "-c", "print('target ran')"], "memcheck",
                              log_path=stub / "logs" / "m.log")
    record = json.loads((stub / "record.jsonl").read_text().splitlines()[0])
    assert record["options"]["--tool"] == "memcheck"
    assert record["options"]["--error-exitcode"] == str(sanitizer.ERROR_EXITCODE)
    assert record["options"]["--print-limit"] == str(sanitizer.DEFAULT_PRINT_LIMIT)
    assert record["options"]["--target-processes"] == "all"
    assert record["command"][0] == sys.executable
    assert "target ran" in run.stdout_tail
    assert run.returncode == sanitizer.ERROR_EXITCODE and run.sanitizer_flagged
    assert run.report.error_summary == 25 and run.report.errors[0].kernel == "planted_oob_write"
    assert Path(run.log_path or "").is_file()


def test_clean_run_is_not_flagged(stub: Path) -> None:
    run = run_under_sanitizer([sys.executable, "-c", "pass"], "racecheck", tool_options=["--racecheck-report", "analysis"])
    assert run.returncode == 0 and not run.sanitizer_flagged and run.report.findings == ()
    record = json.loads((stub / "record.jsonl").read_text().splitlines()[0])
    assert record["options"]["--racecheck-report"] == "analysis"


def test_a_hanging_target_is_killed_at_the_timeout(stub: Path) -> None:
    run = run_under_sanitizer([sys.executable, "-c", "import time; time.sleep(60)"], "memcheck", timeout_s=1.0)
    assert run.timed_out and run.returncode is None and run.duration_s < 30


def test_missing_sanitizer_is_a_skip_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sanitizer.SANITIZER_ENV, str(tmp_path / "nope"))
    with pytest.raises(SanitizerNotFound, match="not an executable"):
        sanitizer.find_compute_sanitizer()
    result = run_planted_suite(["oob_write"])
    assert result["status"] == "skipped" and "not an executable" in result["reason"]


def test_unknown_tool_is_bad_input(stub: Path) -> None:
    from opgate.model.errors import InputError

    with pytest.raises(InputError, match="not one of memcheck"):
        run_under_sanitizer(["true"], "helgrind")


def test_python_targets(tmp_path: Path) -> None:
    assert python_command("pkg.planted", ["oob_write", "bug"])[1:] == ["-m", "pkg.planted", "oob_write", "bug"]
    callable_cmd = python_command("pkg.mod:main", ["x"])
    assert callable_cmd[1] == "-c" and callable_cmd[3:] == ["pkg.mod:main", "x"]
    script = tmp_path / "s.py"
    script.write_text("pass\n")
    assert python_command(str(script)) == [sys.executable, str(script)]
    from opgate.model.errors import InputError

    with pytest.raises(InputError, match="does not exist"):
        python_command(str(tmp_path / "missing.py"))


def _run(sample: str, returncode: int, tool: str, stdout: str = "") -> SanitizerRun:
    report = parse_sanitizer_output((SAMPLES / sample).read_text(), tool)
    return SanitizerRun(tool, ("compute-sanitizer",), returncode, False, 1.0, report, stdout, "", None)


VERIFIED = 'OPGATE_PLANTED {"case": "x", "variant": "clean", "status": "verified"}\n'


@pytest.mark.parametrize(("case", "bug_log", "clean_log", "tool"), [
    ("oob_write", "memcheck_oob_write.log", "clean_memcheck.log", "memcheck"),
    ("shared_race", "racecheck_analysis.log", "clean_racecheck.log", "racecheck"),
    ("shared_race", "racecheck_hazard.log", "clean_racecheck.log", "racecheck"),
    ("uninit_read", "initcheck_uninit_read.log", "clean_memcheck.log", "initcheck"),
    ("divergent_barrier", "synccheck_divergent_barrier.log", "clean_memcheck.log", "synccheck"),
])
def test_planted_case_caught_and_clean_twin_passes(case: str, bug_log: str, clean_log: str, tool: str) -> None:
    status, caught, caught_by, clean_passed, note = judge_planted(
        CASES_BY_NAME[case], _run(bug_log, 86, tool), _run(clean_log, 0, tool, VERIFIED))
    assert (status, caught, caught_by, clean_passed, note) == ("ok", True, "finding", True, "")


def test_a_bug_reported_for_another_kernel_is_not_a_catch() -> None:
    status, caught, *_ = judge_planted(CASES_BY_NAME["oob_write"], _run("memcheck_legacy_layout.log", 0, "memcheck"),
                                       _run("clean_memcheck.log", 0, "memcheck", VERIFIED))
    assert (status, caught) == ("missed", False)


def test_a_report_opgate_cannot_parse_still_counts_by_exit_code_and_says_so() -> None:
    status, caught, caught_by, _, note = judge_planted(
        CASES_BY_NAME["free_async_race"], _run("clean_memcheck.log", 86, "memcheck"),
        _run("clean_memcheck.log", 0, "memcheck", VERIFIED))
    assert (status, caught) == ("ok", True) and caught_by.startswith("exit code") and "parser" in note


def test_a_clean_twin_with_findings_or_a_wrong_result_fails() -> None:
    case = CASES_BY_NAME["oob_write"]
    bug = _run("memcheck_oob_write.log", 86, "memcheck")
    status, _, _, clean_passed, note = judge_planted(case, bug, _run("memcheck_oob_write.log", 86, "memcheck", VERIFIED))
    assert (status, clean_passed) == ("false_positive", False) and "Invalid __global__ write" in note
    wrong = 'OPGATE_PLANTED {"status": "wrong", "detail": "bounded write"}\n'
    status, _, _, clean_passed, note = judge_planted(case, bug, _run("clean_memcheck.log", 1, "memcheck", wrong))
    assert (status, clean_passed) == ("false_positive", False) and "bounded write" in note


SUITE_STUB = r'''#!{python}
import json, os, sys
args = sys.argv[1:]
if args and args[0] == "--help":
    print("--tool --print-limit --error-exitcode --log-file --target-processes --report-api-errors "
          "--racecheck-report")  # this stand-in lacks --track-stream-ordered-races
    sys.exit(0)
if args and args[0] == "--version":
    print("stand-in 0.0")
    sys.exit(0)
opts, i = {{}}, 0
while i < len(args) and args[i].startswith("--"):
    opts[args[i]] = args[i + 1]
    i += 2
case, variant = args[-2], args[-1]
samples = {{"memcheck": "memcheck_oob_write.log", "racecheck": "racecheck_analysis.log",
           "initcheck": "initcheck_uninit_read.log", "synccheck": "synccheck_divergent_barrier.log"}}
if variant == "bug" and case != "free_async_race":
    text = open(os.path.join(os.environ["SAMPLES"], samples[opts["--tool"]])).read()
else:
    text = "========= ERROR SUMMARY: 0 errors\n"
open(opts["--log-file"], "w").write(text)
status = "ran" if variant == "bug" else "verified"
print("OPGATE_PLANTED " + json.dumps({{"case": case, "variant": variant, "status": status}}))
sys.exit(int(opts["--error-exitcode"]) if "ERROR SUMMARY: 0 errors" not in text else 0)
'''


def test_planted_suite_loop_with_a_stand_in_sanitizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's loop, options and result shape (what scripts/gpu_check.sh summarises). The stand-in
    reports every bug with the matching sample except the stream-ordered race, which it 'misses'."""
    from opgate.gpu.probes import device

    path = tmp_path / "compute-sanitizer"
    path.write_text(SUITE_STUB.format(python=sys.executable))
    path.chmod(0o755)
    monkeypatch.setenv(sanitizer.SANITIZER_ENV, str(path))
    monkeypatch.setenv("SAMPLES", str(SAMPLES))
    monkeypatch.setattr(device, "gpu_unavailable_reason", lambda: None)
    sanitizer._help_text.cache_clear()
    progress: list[dict] = []
    result = run_planted_suite(log_dir=tmp_path / "logs", on_progress=progress.append)
    by_case = {c["case"]: c for c in result["cases"]}
    assert [p["status"] for p in progress] == ["incomplete"] * 5
    assert result["status"] == "failed" and (result["caught"], result["clean_passed"], result["judged"]) == (4, 5, 5)
    assert by_case["oob_write"]["status"] == "ok" and by_case["oob_write"]["first_finding"]["kernel"] == "planted_oob_write"
    assert by_case["shared_race"]["bug_run"]["command"][1:3] == ["--tool", "racecheck"]
    assert "--racecheck-report" in by_case["shared_race"]["bug_run"]["command"]
    assert "--report-api-errors" in by_case["oob_write"]["bug_run"]["command"]
    missed = by_case["free_async_race"]
    assert missed["status"] == "missed" and "lacks --track-stream-ordered-races" in missed["note"]
    assert json.dumps(result)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state  # a zombie has exited


def test_sigterm_leaves_no_sanitizer_process_behind(stub: Path) -> None:
    """An outer `timeout` sends SIGTERM; the sanitizer run started in its own session must die with it."""
    import signal
    import subprocess
    import time

    pid_file = stub / "target.pid"
    target = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    script = stub / "target.py"
    script.write_text(target + "\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    cli = subprocess.Popen([sys.executable, str(DATA / "gpu" / "gpu_sanitizer_tool.py"), "run", "--tool", "memcheck", str(script)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.time() < deadline, "the target never started"
        time.sleep(0.1)
    target_pid = int(pid_file.read_text())
    cli.send_signal(signal.SIGTERM)
    cli.communicate(timeout=30)
    assert cli.returncode == 128 + signal.SIGTERM
    deadline = time.time() + 10
    while _alive(target_pid) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(target_pid)


def test_a_run_given_no_log_path_reads_its_log_and_leaves_no_folder_behind(stub: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Every such run left an opgate-sanitizer-* folder with its log in /tmp (racecheck's logs among them)."""
    import tempfile

    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setenv("STUB_LOG", str(SAMPLES / "memcheck_oob_write.log"))
    run = run_under_sanitizer([sys.executable, "-c", "pass"], "memcheck")
    assert run.report.error_summary == 25 and run.log_path is None  # read, then removed
    assert list(temp.iterdir()) == []


def test_a_process_end_is_described_with_the_signal_name_where_one_exists() -> None:
    from opgate.gpu.probes.sanitizer import describe_exit

    assert describe_exit(None) == "did not end"
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(-11) == "was killed by signal 11 (SIGSEGV)"
    # a number with no name on this platform is said as a number, not as "(signal 200)"
    assert describe_exit(-200) == "was killed by signal 200"
