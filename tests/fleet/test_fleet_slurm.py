"""deploy/slurm/opgate-healthcheck.sh run as the command Slurm runs, on this machine: exit codes, the
one-line Reason, drain on a problem, resume only what opgate drained, no silent pass when opgate cannot
judge. Slurm's scontrol is not installed here: a recording stand-in on PATH takes its place."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from opgate_testing import REPO

from opgate.fleet.slurm import MAX_REASON_CHARS, merge_reports, one_line_reason
from opgate.model.results import CheckResult, Figure, Outcome, RunReport

SCRIPT = REPO / "deploy" / "slurm" / "opgate-healthcheck.sh"


@pytest.fixture
def slurm_env(fleet_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    calls, state = tmp_path / "scontrol.calls", tmp_path / "node.state"
    state.write_text("NodeName=gpu-17 State=IDLE\n")
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n[ "$1" = show ] && cat {state}\nexit 0\n')
    scontrol.chmod(0o755)
    flap = tmp_path / "flap"
    flap.write_text("fail")
    return {**fleet_env, "OPGATE_PYTHON": sys.executable, "SCONTROL": str(scontrol), "SLURMD_NODENAME": "gpu-17",
            "OPGATE_ARGS": "--check planted_flapping", "OPGATE_PLANTED_FLAP_FILE": str(flap),
            "TMPDIR": str(tmp_path)}


def run(mode: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), mode], env=env, capture_output=True, text=True, timeout=120)


def calls(env: dict[str, str]) -> list[str]:
    path = Path(env["SCONTROL"]).with_name("scontrol.calls")
    return path.read_text().splitlines() if path.is_file() else []


def test_a_failed_check_drains_with_one_line_and_a_pass_resumes_what_opgate_drained(slurm_env: dict[str, str]) -> None:
    out = run("healthcheck", slurm_env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.strip() == "opgate: failed planted.flapping: planted failure"
    assert calls(slurm_env) == ["update NodeName=gpu-17 State=DRAIN Reason=opgate: failed planted.flapping: "
                                "planted failure"]
    Path(slurm_env["OPGATE_PLANTED_FLAP_FILE"]).write_text("pass")
    Path(slurm_env["SCONTROL"]).with_name("node.state").write_text(
        "NodeName=gpu-17 State=IDLE+DRAIN Reason=opgate: failed planted.flapping: planted failure\n")
    out = run("healthcheck", slurm_env)
    assert out.returncode == 0 and out.stdout.startswith("opgate: ready (1 passed)"), out.stdout + out.stderr
    assert calls(slurm_env)[-2:] == ["show node gpu-17", "update NodeName=gpu-17 State=RESUME"]


def test_a_pass_never_resumes_a_node_someone_else_drained(slurm_env: dict[str, str]) -> None:
    Path(slurm_env["OPGATE_PLANTED_FLAP_FILE"]).write_text("pass")
    Path(slurm_env["SCONTROL"]).with_name("node.state").write_text("State=IDLE+DRAIN Reason=admin: bad fan\n")
    assert run("healthcheck", slurm_env).returncode == 0
    assert calls(slurm_env) == ["show node gpu-17"]


def test_prolog_reports_on_stderr_and_check_mode_changes_nothing(slurm_env: dict[str, str]) -> None:
    prolog = run("prolog", slurm_env)
    assert prolog.returncode == 1 and "opgate: failed planted.flapping" in prolog.stderr
    assert len(calls(slurm_env)) == 1
    check = run("check", slurm_env)
    assert check.returncode == 1 and len(calls(slurm_env)) == 1


def test_no_verdict_is_exit_2_and_drains_never_a_silent_pass(slurm_env: dict[str, str]) -> None:
    out = run("healthcheck", {**slurm_env, "OPGATE_PYTHON": "/nonexistent/python3"})
    assert out.returncode == 2 and out.stdout.startswith("opgate: no verdict:"), out.stdout + out.stderr
    assert calls(slurm_env)[0].startswith("update NodeName=gpu-17 State=DRAIN Reason=opgate: no verdict")
    slow = {**slurm_env, "OPGATE_ARGS": "--check planted_bandwidth", "OPGATE_PLANTED_SLEEP_S": "6",
            "OPGATE_TIMEOUT": "2"}
    out = run("check", slow)
    assert out.returncode == 2 and "did not finish in 2s" in out.stdout
    assert run("frobnicate", slurm_env).returncode == 2


def test_reason_is_one_line_short_and_safe() -> None:
    long = CheckResult("doctor.interposition", "i", Outcome.FAILED, 'cudaMalloc from "/x/libfake.so"\n' + "y" * 500)
    report = RunReport("doctor", (long, CheckResult("doctor.a", "a", Outcome.ERROR, "crashed")), "t", 1.0)
    ready, reason = one_line_reason(report)
    assert not ready and "\n" not in reason and '"' not in reason and len(reason) <= MAX_REASON_CHARS
    assert reason.startswith("opgate: failed doctor.interposition: cudaMalloc from /x/libfake.so") and \
        reason.endswith("... (+1 more)")


def test_an_srun_sweep_merges_into_one_fleet_report_with_baselines(tmp_path: Path) -> None:
    paths = []
    for i, tbs in enumerate([4.5, 4.52, 4.49, 4.1]):
        results = (CheckResult("doctor.gpu_inventory", "inv", Outcome.PASSED, "1 GPU", figures=(
            Figure("GPU0 name", "NVIDIA H200"),
            Figure("driver version", "580.159.04"))),
            CheckResult("doctor.hbm_bandwidth", "hbm", Outcome.PASSED, "in band", figures=(
                Figure("HBM read (opgate kernel)", tbs, "TB/s"),)))
        path = tmp_path / f"gpu-{i}.json"
        path.write_text(json.dumps(RunReport("doctor", results, "t", 20.0, host={"hostname": f"gpu-{i}"}).to_dict()))
        paths.append(path)
    report = merge_reports(paths)
    [outlier] = [r for r in report.results if ".fleet.baseline." in r.check_id or ":fleet.baseline." in r.check_id]
    assert outlier.check_id.startswith("gpu-3:") and "for NVIDIA H200 (driver 580.159.04)" in outlier.reason
    out = subprocess.run([sys.executable, "-m", "opgate.fleet.slurm", "merge", "--json", str(tmp_path / "f.json"),
                          *map(str, paths)], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads((tmp_path / "f.json").read_text())["counts"]["warned"] == 1
