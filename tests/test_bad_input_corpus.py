"""The bad-input corpus, run against every verb (issue 14).

Every case is a real file or path handed to the real CLI in a child process. Each asserts the contract:
the exit code, exactly one line on stderr that names the input (`opgate: error: ...`), no traceback, no
report file left behind (not even a partial one), and no process of the run left alive afterwards.
Processes are found through a marker in their environment, which every child of opgate inherits.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from opgate_testing import DATA, REPO, child_pythonpath

BAD = DATA / "bad_input"
INSPECT = DATA / "inspect"
SPEC = DATA / "verify" / "softmax_spec.py"
MARKER = "OPGATE_CORPUS_RUN"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    marker: str

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def processes_with(marker: str) -> list[int]:
    """PIDs of live processes whose environment carries this run's marker (zombies excluded)."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def env_for(marker: str, extra_path: str = "") -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, child_pythonpath()) if p)
    env[MARKER] = marker
    return env


def opgate(*args: str, timeout: float = 240, extra_path: str = "") -> Run:
    marker = uuid.uuid4().hex
    proc = subprocess.run([sys.executable, "-m", "opgate", *args], capture_output=True, text=True,
                          env=env_for(marker, extra_path), timeout=timeout, cwd=REPO)
    return Run(proc.returncode, proc.stdout, proc.stderr, marker)


def assert_one_line_error(run: Run, names: str, code: int = 2) -> None:
    assert run.returncode == code, run.stdout[-2000:] + run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "Traceback" not in run.stdout
    assert len(run.stderr_lines) == 1, run.stderr
    line = run.stderr_lines[0]
    assert line.startswith("opgate: error: "), line
    assert names in line, f"{names!r} not named in: {line}"
    deadline = time.monotonic() + 5
    while processes_with(run.marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_with(run.marker), "a process of the run outlived it"


# -- inspect: files that are not what they claim -------------------------------------------------------------

def _truncated(source: Path, dest: Path, keep: float) -> Path:
    data = source.read_bytes()
    dest.write_bytes(data[: int(len(data) * keep)])
    return dest


def inspect_inputs(tmp: Path) -> dict[str, Path]:
    tmp.mkdir(exist_ok=True)
    return {
        "empty file": BAD / "empty.bin",
        "/dev/null": Path("/dev/null"),
        "random bytes": BAD / "random.bin",
        "missing file": tmp / "missing.so",
        "truncated ELF": _truncated(INSPECT / "libkernels.so", tmp / "trunc.so", 0.02),
        "truncated cubin": _truncated(INSPECT / "sm89.cubin", tmp / "trunc.cubin", 0.3),
        "truncated fatbin": _truncated(INSPECT / "kernels.fatbin", tmp / "trunc.fatbin", 0.09),
        "truncated wheel": _truncated(INSPECT / "demo-0.1-py3-none-linux_x86_64.whl", tmp / "trunc.whl", 0.5),
    }


INSPECT_CASES = ["empty file", "/dev/null", "random bytes", "missing file", "truncated ELF", "truncated cubin",
                 "truncated fatbin", "truncated wheel"]


@pytest.mark.parametrize("case", INSPECT_CASES)
def test_inspect_unreadable_input_is_exit_2_one_line_and_no_report(case: str, tmp_path: Path) -> None:
    path = inspect_inputs(tmp_path / "in")[case]
    report = tmp_path / "r.json"
    run = opgate("inspect", str(path), "--targets", "h100")
    assert_one_line_error(run, str(path))
    assert not report.exists()


def test_inspect_unreadable_file(tmp_path: Path) -> None:
    if IS_ROOT:
        pytest.skip("root reads files regardless of permissions")
    path = tmp_path / "locked.so"
    shutil.copy(INSPECT / "libkernels.so", path)
    path.chmod(0)
    assert_one_line_error(opgate("inspect", str(path)), str(path))


def test_inspect_fleet_that_is_a_directory(tmp_path: Path) -> None:
    assert_one_line_error(opgate("inspect", str(INSPECT / "sm89.cubin"), "--fleet", str(tmp_path)), str(tmp_path))


def test_inspect_fleet_error_names_the_table(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[[gpu]]\nmodle = "h100"\n')
    assert_one_line_error(opgate("inspect", str(INSPECT / "sm89.cubin"), "--fleet", str(fleet)), "[[gpu]] #1")


# -- verify and analyze: specs that misbehave at import, references that raise, sizes too large -------------

SPEC_CASES = [
    ("spec_exits_0.py", "called sys.exit(0)"),
    ("spec_os_exit.py", "exit code 7"),
    ("spec_segfaults.py", "SIGSEGV"),
    ("spec_raises.py", "RuntimeError: this spec is broken on purpose"),
    ("spec_no_operator.py", "defines no opgate.Operator"),
    ("empty.bin", "give it a .py name"),
    ("reference_raises.py", "ZeroDivisionError"),
    ("spec_empty_dtypes.py", "dtypes is empty"),
    ("spec_dtypes_string.py", "is a string; give a list"),
    ("spec_dims_not_a_list.py", "dims['N'] = 8 is not a list of sizes"),
]
VERIFY_ONLY_SPEC_CASES = [("reference_random.py", "must be deterministic")]


@pytest.mark.parametrize("verb", ["verify", "analyze"])
@pytest.mark.parametrize("name, said", SPEC_CASES)
def test_a_misbehaving_spec_is_exit_2_naming_it(verb: str, name: str, said: str, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    extra = ["--budget", "quick", "--no-extras"] if verb == "verify" else ["--targets", "sm_90", "--stages",
                                                                             "roofline"]
    run = opgate(verb, str(BAD / name), *extra, "--json", str(report), "--out", str(tmp_path / "out"))
    assert_one_line_error(run, name)
    assert said in run.stderr_lines[0]
    assert not report.exists()


@pytest.mark.parametrize("name, said", VERIFY_ONLY_SPEC_CASES)
def test_a_misbehaving_reference_is_exit_2_naming_it(name: str, said: str, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    run = opgate("verify", str(BAD / name), "--budget", "quick", "--no-extras", "--json", str(report))
    assert_one_line_error(run, name)
    assert said in run.stderr_lines[0]
    assert not report.exists()


def test_an_operator_with_no_implementation_is_exit_2_not_a_pass_on_opgates_extras(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    run = opgate("verify", str(BAD / "spec_no_implementation.py"), "--budget", "quick", "--json", str(report))
    assert_one_line_error(run, "spec_no_implementation.py")
    assert "'tripled'" in run.stderr_lines[0] and "has no implementation" in run.stderr_lines[0]
    assert not report.exists()


def test_a_spec_that_hangs_at_import_is_stopped_by_timeout(tmp_path: Path) -> None:
    started = time.monotonic()
    run = opgate("verify", str(BAD / "spec_hangs.py"), "--timeout", "3", "--json", str(tmp_path / "r.json"))
    assert time.monotonic() - started < 60
    assert_one_line_error(run, "spec_hangs.py")
    assert "did not finish importing within 3 s" in run.stderr_lines[0]


def test_a_case_too_large_for_this_machine_is_refused_up_front(tmp_path: Path) -> None:
    run = opgate("verify", str(BAD / "huge_dims.py"), "--budget", "quick", "--no-extras",
                 "--json", str(tmp_path / "r.json"))
    assert_one_line_error(run, "huge_dims.py")
    assert "M=1048576,N=1048576" in run.stderr_lines[0] and "TB" in run.stderr_lines[0]


@pytest.mark.parametrize("verb", ["verify", "analyze"])
@pytest.mark.parametrize("what", ["directory", "/dev/null", "missing"])
def test_a_spec_path_that_is_not_a_file(verb: str, what: str, tmp_path: Path) -> None:
    path = {"directory": tmp_path, "/dev/null": Path("/dev/null"), "missing": tmp_path / "nope.py"}[what]
    assert_one_line_error(opgate(verb, str(path)), str(path))


def test_analyze_refuses_an_unknown_architecture() -> None:
    run = opgate("analyze", str(SPEC), "--targets", "sm_999")
    assert_one_line_error(run, "sm_999")
    assert "--allow-unknown-arch" in run.stderr_lines[0]


# -- report paths, for every verb, checked before any work --------------------------------------------------

VERB_ARGS = {
    "doctor": ["doctor", "--check", "container"],
    "inspect": ["inspect", str(INSPECT / "sm89.cubin")],
    "verify": ["verify", str(SPEC), "--budget", "quick", "--no-extras"],
    "analyze": ["analyze", str(SPEC), "--targets", "sm_90"],
    "occupancy": ["occupancy", "--cc", "9.0", "--threads", "128", "--registers", "32"],
}


def report_paths(tmp: Path) -> dict[str, Path]:
    return {
        "a directory": tmp,
        "a missing folder": tmp / "no" / "such" / "r.json",
        "under /proc": Path("/proc/r.json"),
        "a file as folder": BAD / "empty.bin" / "r.json",
    }


# Every verb against a directory and /proc; the other kinds once (they take the same path through the check).
PATH_CASES = ([(verb, where) for verb in VERB_ARGS for where in ("a directory", "under /proc")]
              + [("doctor", "a missing folder"), ("verify", "a file as folder")])


@pytest.mark.parametrize("verb, where", PATH_CASES)
def test_an_unwritable_report_path_is_refused_before_any_work(verb: str, where: str, tmp_path: Path) -> None:
    path = report_paths(tmp_path)[where]
    started = time.monotonic()
    run = opgate(*VERB_ARGS[verb], "--json", str(path))
    assert_one_line_error(run, str(path))
    assert "--json" in run.stderr_lines[0]
    assert run.stdout == "", "work started before the report path was checked"
    assert time.monotonic() - started < 30


SAME_FILE_CASES = [("doctor", "--json", "--html"), ("verify", "--json", "--junit"), ("inspect", "--junit", "--html"),
                   ("analyze", "--html", "--history"), ("verify", "--html", "--markdown")]


# --markdown on every verb that writes reports, `opgate fleet` too (refused before it connects to Ray).
MARKDOWN_CASES = [(verb, "a missing folder") for verb in ("doctor", "inspect", "verify", "analyze", "fleet")] + [
    ("verify", "a directory")]


@pytest.mark.parametrize("verb, where", MARKDOWN_CASES)
def test_an_unwritable_markdown_summary_is_refused_before_any_work(verb: str, where: str, tmp_path: Path) -> None:
    path = report_paths(tmp_path)[where]
    args = ["fleet", "doctor"] if verb == "fleet" else VERB_ARGS[verb]
    run = opgate(*args, "--markdown", str(path))
    assert_one_line_error(run, str(path))
    assert run.stderr_lines[0].startswith(f"opgate: error: --markdown {path}")
    assert run.stdout == "", "work started before the summary path was checked"


@pytest.mark.parametrize("verb, first, second", SAME_FILE_CASES)
def test_two_reports_naming_one_file_are_refused_before_any_work(verb: str, first: str, second: str,
                                                                 tmp_path: Path) -> None:
    """`--json X --html X` wrote one report over the other and said it wrote both (issue #28)."""
    path = tmp_path / "report.out"
    run = opgate(*VERB_ARGS[verb], first, str(path), second, str(path))
    assert_one_line_error(run, str(path))
    assert first in run.stderr_lines[0] and second in run.stderr_lines[0]
    assert run.stdout == "" and not path.exists(), "work started, or a report was written, before the check"


@pytest.mark.parametrize("target", ["sm_999", "sm_5"])
def test_inspect_refuses_an_architecture_no_toolkit_builds_for(target: str) -> None:
    """`inspect --targets sm_999` judged a target `analyze` refuses (issue #28)."""
    run = opgate("inspect", str(INSPECT / "sm89.cubin"), "--targets", target)
    assert_one_line_error(run, target)


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
@pytest.mark.parametrize("verb", ["doctor", "inspect", "occupancy"])
def test_a_terminal_that_cannot_encode_the_output_gets_it_anyway(verb: str, encoding: str) -> None:
    """PYTHONIOENCODING=ascii made the summary line's dash a UnicodeEncodeError and exit 3 (issue #28)."""
    env = {**os.environ, "PYTHONPATH": child_pythonpath(), "PYTHONIOENCODING": encoding}
    proc = subprocess.run([sys.executable, "-m", "opgate", *VERB_ARGS[verb]], capture_output=True, env=env,
                          timeout=300)
    assert proc.returncode in (0, 1), proc.stderr.decode(encoding, "replace")[-2000:]
    assert b"Traceback" not in proc.stderr and b"UnicodeEncodeError" not in proc.stderr


def test_a_read_only_folder_is_refused(tmp_path: Path) -> None:
    if IS_ROOT:
        pytest.skip("root writes into read-only folders")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    assert_one_line_error(opgate(*VERB_ARGS["doctor"], "--json", str(folder / "r.json")), str(folder))


def test_doctor_framework_that_is_not_installed() -> None:
    run = opgate("doctor", "--framework", "nosuchmod_opgate")
    assert_one_line_error(run, "nosuchmod_opgate")
    assert "no Python module of that name" in run.stderr_lines[0]


# -- interrupts: SIGINT mid-run ----------------------------------------------------------------------------

PLANTED_SLOW = '''
import subprocess, time
from opgate.checks.base import Check


class SlowCheck(Check):
    check_id = "planted.slow"
    title = "slow, with a grandchild"
    timeout_s = 300.0

    def evaluate(self, ctx):
        subprocess.Popen(["sleep", "300"])  # a grandchild: must die with the run too
        time.sleep(300)
'''


def _plugin(tmp: Path) -> str:
    (tmp / "corpus_planted.py").write_text(PLANTED_SLOW)
    dist = tmp / "opgate_corpus-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: opgate-corpus\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[opgate.checks]\ndoctor.planted_slow = corpus_planted:SlowCheck\n"
                                           "doctor.planted_passing = planted_checks:PassingCheck\n")
    return str(tmp)


def _interrupt(args: list[str], ready: callable, extra_path: str = "", deadline_s: float = 120,
               env_extra: dict[str, str] | None = None) -> Run:
    marker = uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, "-m", "opgate", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**env_for(marker, extra_path), **(env_extra or {})},
                            cwd=REPO)
    started = time.monotonic()
    while not ready(marker, proc.pid) and time.monotonic() - started < deadline_s and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(0.5)  # a finished child is collected by the parent's next poll (every 20 ms)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return Run(proc.returncode, out, err, marker)


def _slow_check_alone(marker: str, pid: int) -> bool:
    """The passing check has finished; the slow check's worker and its `sleep` grandchild are alive."""
    children = [p for p in processes_with(marker) if p != pid]
    try:
        commands = [Path(f"/proc/{p}/cmdline").read_bytes() for p in children]
    except OSError:
        return False
    return len(children) == 2 and any(c.startswith(b"sleep") for c in commands)


def _assert_interrupted(run: Run, report: Path, finished: int) -> None:
    assert run.returncode == 130, run.stdout[-2000:] + run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    assert len(run.stderr_lines) == 1 and run.stderr_lines[0].startswith("opgate: interrupted"), run.stderr
    assert str(report) in run.stderr_lines[0]
    data = json.loads(report.read_text())
    assert data["interrupted"] is True and data["exit_code"] == 130
    assert len(data["results"]) >= finished and data["extra"]["not_run"]
    assert not list(report.parent.glob(f".{report.name}.*")), "a temporary report file was left behind"
    time.sleep(0.5)
    assert not processes_with(run.marker), "a child of the interrupted run is still alive"


@pytest.mark.slow
def test_sigint_during_doctor_stops_every_child_and_writes_the_report_so_far(tmp_path: Path) -> None:
    report, summary = tmp_path / "r.json", tmp_path / "summary.md"
    plugin = _plugin(tmp_path)
    # Ready once the slow check's worker and its `sleep` grandchild are both alive.
    run = _interrupt(["doctor", "--check", "planted_slow", "--check", "planted_passing", "--jobs", "2",
                      "--json", str(report), "--markdown", str(summary)], _slow_check_alone, extra_path=plugin)
    _assert_interrupted(run, report, finished=1)
    assert "planted.slow" in json.loads(report.read_text())["extra"]["not_run"]
    # a cancelled CI job still gets its summary
    assert str(summary) in run.stderr_lines[0]
    assert summary.read_text().startswith("## opgate doctor: INTERRUPTED\n\n**Exit code 130**")


@pytest.mark.slow
def test_sigint_during_verify_stops_every_child_and_writes_the_report_so_far(tmp_path: Path) -> None:
    report, html = tmp_path / "r.json", tmp_path / "r.html"
    private_tmp = tmp_path / "tmp"  # this run's own TMPDIR: other opgate runs on the machine do not count
    private_tmp.mkdir()

    # Ready once the calibration has written its plan and the runner runs (the checks start while the
    # calibration runs, so the runner's folder alone does not say the calibration result is in).
    def ready(marker: str, pid: int) -> bool:
        return (any(private_tmp.glob("opgate-verify-*/plan-*.pt"))
                and any(private_tmp.glob("opgate-run-*")))

    run = _interrupt(["verify", str(BAD / "slow_spec.py"), "--budget", "quick", "--no-extras",
                      "--json", str(report), "--html", str(html), "--out", str(tmp_path / "out")], ready,
                     env_extra={"TMPDIR": str(private_tmp)})
    _assert_interrupted(run, report, finished=1)
    # the HTML report too: the interrupt path writes every planned file through reporting.emit
    assert str(html) in run.stderr_lines[0] and 'id="verdict">INTERRUPTED<' in html.read_text()


def test_sigint_before_any_check_leaves_no_report(tmp_path: Path) -> None:
    report = tmp_path / "r.json"

    def importing(marker: str, pid: int) -> bool:  # the hanging spec's pre-flight child is running
        return any(b"opgate.engine.specload" in Path(f"/proc/{p}/cmdline").read_bytes()
                   for p in processes_with(marker) if Path(f"/proc/{p}").exists())

    run = _interrupt(["verify", str(BAD / "spec_hangs.py"), "--json", str(report)], importing)
    assert run.returncode == 130, run.stderr
    assert len(run.stderr_lines) == 1 and "no report was written" in run.stderr_lines[0]
    assert not report.exists()
    time.sleep(0.5)
    assert not processes_with(run.marker)


@pytest.mark.slow
def test_sigkill_of_opgate_takes_its_workers_with_it(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG: a worker dies with its parent even when the parent gets no chance to clean up."""
    plugin = _plugin(tmp_path)
    marker = uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, "-m", "opgate", "doctor", "--check", "planted_slow"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env_for(marker, plugin),
                            cwd=REPO)

    def workers() -> list[int]:
        found = []
        for pid in processes_with(marker):
            try:
                if b"opgate.engine.worker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                continue
        return found

    deadline = time.monotonic() + 60
    while not workers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert workers(), "the worker never started"
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while workers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not workers(), "a worker outlived the SIGKILL of opgate"
    for pid in processes_with(marker):  # the check's own `sleep` grandchild: not covered by PDEATHSIG
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("args, failed", [
    (["doctor", "--check", "gpu_inventory", "--fail-on-skip"], "doctor.gpu_inventory"),
    (["doctor", "--check", "container", "--require-gpu"], "gpu.required"),
])
def test_skips_fail_when_asked(args: list[str], failed: str, tmp_path: Path) -> None:
    from opgate_testing import gpu_available

    if gpu_available()[0]:
        pytest.skip("a GPU is visible here: nothing is skipped for want of one")
    report = tmp_path / "r.json"
    run = opgate(*args, "--json", str(report))
    assert run.returncode == 1, run.stdout + run.stderr
    results = {r["check_id"]: r for r in json.loads(report.read_text())["results"]}
    assert results[failed]["outcome"] == "failed"
    assert not [r for r in results.values() if r["outcome"] == "skipped"]


def test_a_missing_optional_dependency_names_its_extra(tmp_path: Path) -> None:
    """matplotlib made unimportable for real (None in sys.modules): one line naming the extra, exit 2."""
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from opgate.cli.main import main\n"
            f"main(['analyze', {str(DATA / 'analyze' / 'analyze_ops.py')!r}, '--targets', 'sm_90', '--stages', "
            f"'roofline', '--gpus', 'h100', '--out', {str(tmp_path)!r}])")
    marker = uuid.uuid4().hex
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_for(marker),
                          timeout=240, cwd=REPO)
    run = Run(proc.returncode, proc.stdout, proc.stderr, marker)
    assert_one_line_error(run, "'matplotlib'")
    assert "pip install 'opgate[verify]'" in run.stderr_lines[0]


def _sqlite(path: Path, *tables: str) -> Path:
    import sqlite3

    with sqlite3.connect(path) as conn:
        for table in tables:
            conn.execute(f"create table {table} (a)")
    return path


@pytest.mark.parametrize("verb", ["history", "diff"])
@pytest.mark.parametrize("db", ["missing", "another_app", "foreign_columns"])
def test_a_command_that_only_reads_history_never_creates_or_alters_a_database(verb: str, db: str,
                                                                              tmp_path: Path) -> None:
    """`opgate history X` created X, and added opgate's tables to another application's SQLite file; a database
    with opgate's table names but other columns was a traceback (issue #28). One line, exit 2, the file as it was."""
    path = {"missing": tmp_path / "typo.db", "another_app": _sqlite(tmp_path / "app.db", "orders"),
            "foreign_columns": _sqlite(tmp_path / "old.db", "opgate_runs", "opgate_figures")}[db]
    before = path.read_bytes() if path.exists() else None
    if verb == "history":
        run = opgate("history", str(path))
    else:
        report = tmp_path / "new.json"
        assert opgate("inspect", str(INSPECT / "sm89.cubin"), "--json", str(report)).returncode in (0, 1)
        run = opgate("diff", str(report), "--against-last", str(path))
    assert_one_line_error(run, str(path))
    assert (path.read_bytes() if path.exists() else None) == before


@pytest.mark.parametrize("db", ["not_sqlite", "foreign_columns"])
def test_a_history_database_that_cannot_take_the_run_is_refused_before_any_work(db: str, tmp_path: Path) -> None:
    """A --history file opgate cannot store into failed after every check had run (issue #28)."""
    path = tmp_path / "runs.db"
    if db == "not_sqlite":
        path.write_text("not a database\n")
    else:
        _sqlite(path, "opgate_runs")
    before = path.read_bytes()
    run = opgate("inspect", str(INSPECT / "sm89.cubin"), "--history", str(path))
    assert_one_line_error(run, str(path))
    assert run.stdout == "" and path.read_bytes() == before


LEAKY_SPEC = '''
import os
import opgate

_FORKED = []


def _leaky(x):
    if not _FORKED:  # once per process: a daemon by double fork, in a session of its own
        _FORKED.append(True)
        child = os.fork()
        if child == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv("/bin/sleep", ["sleep", "987.654"])
            os._exit(0)
        os.waitpid(child, 0)
    return x.clone()


copy = opgate.Operator("copy", reference=lambda x: x.clone(), inputs=[opgate.TensorSpec("x", ("N",))],
                       dims={"N": [64]}, dtypes=["float32"])
copy.implementation("leaky", backend="torch")(_leaky)
'''


def _sleepers() -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if (entry / "cmdline").read_bytes() == b"sleep\x00987.654\x00":
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreapers and /proc are Linux's")
def test_a_process_an_implementation_leaves_behind_is_ended_and_reported(tmp_path: Path) -> None:
    """An implementation that forks a child which calls setsid() left it running after a PASS (issue #28): opgate
    adopts such orphans (a child subreaper), ends them, and fails the run naming the process and its check."""
    spec = tmp_path / "leaky_spec.py"
    spec.write_text(LEAKY_SPEC)
    report = tmp_path / "r.json"
    run = opgate("verify", str(spec), "--budget", "quick", "--no-extras", "--stages", "numerics", "--json",
                 str(report))
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    [leak] = [r for r in json.loads(report.read_text())["results"] if r["check_id"] == "verify.leaked_processes"]
    assert leak["outcome"] == "failed" and "sleep 987.654" in leak["reason"]
    assert "verify.copy.leaky.float32" in leak["reason"]
    assert not _sleepers(), "the daemon outlived the run"


PLAN_ROOT = REPO / "examples" / "plan"
TRACE = REPO / "tests" / "data" / "plan" / "request_trace.csv"
PLAN_BAD_CASES = [
    (["plan", "autoscale", "/bin/true", "--slo-p95-ms", "100", "--service-ms", "10"], "/bin/true"),
    (["plan", "autoscale", str(TRACE), "--slo-p95-ms", "100", "--service-histogram", "/bin/true"], "/bin/true"),
    (["plan", "mig", "/bin/true", "--fleet", str(PLAN_ROOT / "fleet.toml")], "/bin/true"),
    (["plan", "mig", str(PLAN_ROOT / "workloads.toml"), "--fleet", "/bin/true"], "/bin/true"),
    (["plan", "mig", str(PLAN_ROOT / "workloads.toml"), "--fleet", str(PLAN_ROOT / "fleet.toml"), "--out", "FILE"],
     "--out"),
    (["plan", "mps", str(PLAN_ROOT / "workloads.toml"), "--fleet", str(PLAN_ROOT / "fleet.toml"), "--out", "FILE"],
     "--out"),
    (["plan", "autoscale", str(TRACE), "--slo-p95-ms", "100", "--service-ms", "10", "--out", "FILE"], "--out"),
]


@pytest.mark.parametrize("args, names", PLAN_BAD_CASES)
def test_plan_refuses_a_binary_input_or_an_out_that_is_a_file(args: list[str], names: str, tmp_path: Path) -> None:
    """`plan autoscale` on a binary and `plan mig --out` onto an existing file were tracebacks (issue #28)."""
    existing = tmp_path / "existing"
    existing.write_text("keep me\n")
    run = opgate(*[str(existing) if a == "FILE" else a for a in args])
    assert_one_line_error(run, names)
    assert existing.read_text() == "keep me\n"


@pytest.mark.parametrize("verb", ["verify", "inspect"])
@pytest.mark.parametrize("link", ["loop", "dangling"])
def test_a_symbolic_link_loop_or_a_dangling_link_is_named_as_such(verb: str, link: str, tmp_path: Path) -> None:
    """A symlink loop was reported as "no such file" (issue #28): the link is there, what it points to is not."""
    path = tmp_path / "spec.py"
    if link == "loop":
        (tmp_path / "other.py").symlink_to(path)
        path.symlink_to(tmp_path / "other.py")
    else:
        path.symlink_to(tmp_path / "nowhere.py")
    run = opgate(verb, str(path))
    assert_one_line_error(run, str(path))
    assert ("loops back on itself" if link == "loop" else "nowhere.py, which does not exist") in run.stderr


@pytest.mark.parametrize("field, value", [("o", "renamed_op"), ("i", "renamed_impl"), ("t", "float8_e4m3fn")])
def test_a_replay_token_naming_something_renamed_blames_the_token_not_a_filter(field: str, value: str) -> None:
    """A replay token whose operator was renamed was reported as "--op 'x' is not defined": a filter the user never
    gave (issue #28)."""
    import base64

    token = {"b": "quick", "d": {"M": 1, "N": 1}, "i": "triton", "l": "contiguous", "o": "softmax", "p": 0,
             "r": "typical", "s": 7, "t": "float32", field: value}
    text = "ogv1." + base64.urlsafe_b64encode(json.dumps(token, separators=(",", ":")).encode()).decode().rstrip("=")
    run = opgate("verify", str(REPO / "examples" / "ops" / "softmax.py"), "--replay", text)
    assert_one_line_error(run, value)
    assert "--replay token" in run.stderr and "--op " not in run.stderr and "--impl " not in run.stderr


def test_inspect_of_a_folder_without_device_code_is_not_green(tmp_path: Path) -> None:
    """`inspect` of a folder of empty files said "0 file(s)" with exit 0 while one empty file is exit 2 (#28)."""
    for k in range(40):
        (tmp_path / f"empty{k}.so").write_bytes(b"")
    assert_one_line_error(opgate("inspect", str(tmp_path)), str(tmp_path))


def test_explain_refuses_a_gpu_it_does_not_know() -> None:
    """`explain --gpu` with an unknown GPU ignored it and judged with the report's own (#28)."""
    run = opgate("explain", str(REPO / "tests" / "data" / "ncu" / "gelu_triton_h200.csv"), "--gpu", "H999 Imaginary")
    assert_one_line_error(run, "H999 Imaginary")


def test_an_implementation_returning_a_one_element_tuple_for_a_one_tensor_op_fails(tmp_path: Path) -> None:
    """A one-element tuple for a one-tensor op passed (issue #28): `y = op(x)` then holds a tuple. It is a FAIL of
    class `structure`; the implementation that returns the reference's form passes."""
    spec = tmp_path / "tuple_spec.py"
    spec.write_text("import opgate\n"
                    "double = opgate.Operator('double', reference=lambda x: x * 2, inputs=[opgate.TensorSpec('x', "
                    "('N',))], dims={'N': [64]}, dtypes=['float32'])\n"
                    "double.implementation('tuple_of_one', backend='torch')(lambda x: (x * 2,))\n"
                    "double.implementation('plain', backend='torch')(lambda x: x * 2)\n")
    report = tmp_path / "r.json"
    run = opgate("verify", str(spec), "--budget", "quick", "--no-extras", "--stages", "numerics", "--json", str(report))
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    results = {r["check_id"]: r for r in json.loads(report.read_text())["results"]}
    assert results["verify.double.tuple_of_one.float32"]["extra"]["failure_class"] == "structure"
    assert results["verify.double.plain.float32"]["outcome"] == "passed"


SOFTMAX = str(REPO / "examples" / "ops" / "softmax.py")
CUBIN = str(INSPECT / "sm89.cubin")
OCC = ["occupancy", "--cc", "9.0", "--threads", "128", "--registers", "32"]
OPTION_CASES = [  # (arguments, text the one line must name)
    (["verify", SOFTMAX, "--jobs", "0"], "--jobs"),
    (["verify", SOFTMAX, "--jobs", "-3"], "--jobs"),
    (["verify", SOFTMAX, "--timeout", "-5"], "--timeout"),
    (["verify", SOFTMAX, "--time-budget", "nan"], "--time-budget"),
    (["verify", SOFTMAX, "--time-budget", "-1"], "--time-budget"),
    (["verify", SOFTMAX, "--seed", "abc"], "--seed"),
    (["verify", SOFTMAX, "--budget", "huge"], "--budget"),
    (["verify", SOFTMAX, "--stages", "nosuch"], "nosuch"),
    (["verify", SOFTMAX, "--sanitizer-tools", "nosuch"], "nosuch"),
    (["verify", SOFTMAX, "--case-timeout", "0"], "--case-timeout"),
    (["verify", SOFTMAX, "--dtype", "float99"], "float99"),
    (["verify", SOFTMAX, "--op", ""], "--op"),
    (["verify", SOFTMAX, "--changed-since", "no-such-ref-xyz"], "no-such-ref-xyz"),
    (["verify", SOFTMAX, "--replay", ""], "--replay"),  # ran the whole plan
    (["occupancy", "--cc", "99.9", "--threads", "128", "--registers", "32"], "99.9"),
    (["occupancy", "--cc", "9.0", "--threads", "0", "--registers", "32"], "threads"),
    ([*OCC, "--dynamic-shared", "-1"], "dynamic shared"),
    ([*OCC, "--carveout", "150"], "carve-out"),
    (["occupancy", "--gpu", "nosuchgpu", "--threads", "128", "--registers", "32"], "nosuchgpu"),
    (["occupancy", "--threads", "128", "--registers", "32"], "--gpu"),
    (["inspect", CUBIN, "--targets", "sm_abc"], "sm_abc"),
    (["inspect", CUBIN, "--targets", ""], "--targets"),  # judged nothing and passed
    (["inspect", CUBIN, "--fleet", "/no/such/fleet.toml"], "/no/such/fleet.toml"),
    (["explain", "/no/such.csv"], "/no/such.csv"),
    (["explain", "/dev/null"], "not a regular file"),  # was "no such file"
    (["explain", str(REPO / "README.md")], "README.md"),
    (["diff", "/no/such.json", "/no/such2.json"], "/no/such.json"),
    (["diff", str(REPO / "README.md"), str(REPO / "README.md")], "README.md"),
    (["history", "/no/such.db", "--limit", "0"], "--limit"),
    (["plan", "mig", "/no/such.toml", "--fleet", str(PLAN_ROOT / "fleet.toml")], "/no/such.toml"),
    (["plan", "mps", str(PLAN_ROOT / "workloads.toml"), "--fleet", "/no/such.toml"], "/no/such.toml"),
    (["plan", "autoscale", str(TRACE), "--slo-p95-ms", "100"], "--service-ms"),
    (["plan", "autoscale", str(TRACE), "--slo-p95-ms", "100", "--service-ms", "10", "--min-replicas", "5",
      "--max-replicas", "2"], "--min-replicas"),
    (["analyze", SOFTMAX, "--targets", "sm_abc"], "sm_abc"),
    (["analyze", "/no/such.py"], "/no/such.py"),
    (["doctor", "--check", "nosuch"], "nosuch"),
    (["doctor", "--level", "nosuch"], "--level"),
]


@pytest.mark.parametrize("args, names", OPTION_CASES, ids=[" ".join(a[:1] + a[2:] if len(a) > 2 else a)[:60]
                                                           for a, _ in OPTION_CASES])
def test_a_bad_option_value_is_one_line_and_exit_2_before_any_work(args: list[str], names: str) -> None:
    run = opgate(*args)
    assert_one_line_error(run, names)


DAMAGED_REPORTS = {
    "results_not_a_list": {"verb": "doctor", "results": {}},
    "result_without_check_id": {"verb": "doctor", "results": [{"outcome": "passed"}]},
    "no_verb": {"results": []},
    "unknown_outcome": {"verb": "doctor", "results": [{"check_id": "a", "outcome": "bogus"}]},
    "result_not_an_object": {"verb": "doctor", "results": ["passed"]},
}


@pytest.mark.parametrize("damage", sorted(DAMAGED_REPORTS))
def test_diff_of_a_damaged_report_is_one_line(damage: str, tmp_path: Path) -> None:
    """`diff` of a report whose results is not a list or lacks check_id/verb was a traceback (issue #28)."""
    path = tmp_path / f"{damage}.json"
    path.write_text(json.dumps({"tool": "opgate", "schema_version": 2, **DAMAGED_REPORTS[damage]}))
    assert_one_line_error(opgate("diff", str(path), str(path)), str(path))


MORE_INPUT_CASES = [
    (["history", "/no/such.db", "--figure", "x.y"], "/no/such.db"),
    (["verify", SOFTMAX, "/no/such_spec.py"], "/no/such_spec.py"),
    (["explain", str(REPO / "tests" / "data" / "ncu" / "gelu_triton_h200.csv"), "--kernel", "("], "--kernel"),
    ([*OCC, "--json", "/no/such/dir/x.json"], "/no/such/dir"),
    (["inspect", CUBIN, "--targets", " , ,"], "--targets"),
    (["verify", SOFTMAX, "--replay", "   "], "--replay"),
]


@pytest.mark.parametrize("args, names", MORE_INPUT_CASES)
def test_more_bad_inputs_are_one_line(args: list[str], names: str) -> None:
    assert_one_line_error(opgate(*args), names)


@pytest.mark.parametrize("text, names", [("workload:\n  - name: a\n   bad: [\n", "could not be parsed"),
                                         ('[[workload]]\nname = "a"\nmemory_gb = -4\nreplicas = 1\n', "memory_gb")])
def test_plan_names_the_broken_workload_file(text: str, names: str, tmp_path: Path) -> None:
    path = tmp_path / ("w.yaml" if text.startswith("workload:") else "w.toml")
    path.write_text(text)
    assert_one_line_error(opgate("plan", "mig", str(path), "--fleet", str(PLAN_ROOT / "fleet.toml")), names)


@pytest.mark.parametrize("url", ["sqlite:////no/such/dir/runs.db", "postgresql://nobody@nosuchhost.invalid/runs"])
def test_an_unreachable_history_url_is_refused_before_any_work(url: str, tmp_path: Path) -> None:
    """A bad --history was opened only after every check ran: the run printed "exit code 0", exited 2 and left a
    JSON saying 0 (issue #28). A database URL is connected to before any work."""
    report = tmp_path / "r.json"
    run = opgate("inspect", CUBIN, "--history", url, "--json", str(report))
    assert_one_line_error(run, url)
    assert not report.exists() and run.stdout == ""
