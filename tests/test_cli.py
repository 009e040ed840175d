from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from opgate_testing import child_pythonpath, run_opgate


@pytest.fixture
def plugin_env(tmp_path: Path) -> dict[str, str]:
    """A third-party plugin distribution registering planted checks through the entry-point group."""
    dist = tmp_path / "opgate_planted-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: opgate-planted\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[opgate.checks]\n"
        "doctor.planted_crash = planted_checks:RaisingCheck\n"
        "doctor.planted_failing = planted_checks:FailingCheck\n"
        "doctor.planted_warning = planted_checks:WarningCheck\n"
        "doctor.planted_passing = planted_checks:PassingCheck\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), child_pythonpath()])
    return env


def test_help_is_instant_and_imports_no_heavy_library() -> None:
    code = ("import sys, runpy; sys.argv=['opgate','--help']\n"
            "try:\n    runpy.run_module('opgate', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "heavy=[m for m in ('torch','triton','onnxruntime','cupy','matplotlib','pynvml','cuda') if m in sys.modules]\n"
            "print('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": child_pythonpath()}, timeout=60)
    assert "doctor" in out.stdout
    assert "HEAVY []" in out.stdout


def test_plugin_check_passes_exit_0(plugin_env: dict[str, str]) -> None:
    out = run_opgate(["doctor", "--check", "planted_passing"], env=plugin_env)
    assert out.returncode == 0, out.stdout + out.stderr


def test_failed_check_exits_1_and_writes_reports(plugin_env: dict[str, str], tmp_path: Path) -> None:
    json_path, junit_path = tmp_path / "r.json", tmp_path / "r.xml"
    out = run_opgate(["doctor", "--check", "planted_failing", "--check", "planted_passing",
                      "--json", str(json_path), "--junit", str(junit_path)], env=plugin_env)
    assert out.returncode == 1, out.stdout + out.stderr
    data = json.loads(json_path.read_text())
    assert data["exit_code"] == 1 and data["counts"]["failed"] == 1
    assert ET.parse(junit_path).getroot().find("testsuite").get("failures") == "1"


def test_warning_exits_0_and_1_under_strict(plugin_env: dict[str, str]) -> None:
    assert run_opgate(["doctor", "--check", "planted_warning"], env=plugin_env).returncode == 0
    assert run_opgate(["doctor", "--check", "planted_warning", "--strict"], env=plugin_env).returncode == 1


def test_crashing_check_exits_3_and_run_goes_on(plugin_env: dict[str, str], tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    out = run_opgate(["doctor", "--check", "planted_crash", "--check", "planted_passing", "--json", str(report)],
                     env=plugin_env)
    assert out.returncode == 3, out.stdout + out.stderr
    # The terminal table wraps reasons at 100 columns; the words are in the cell, the whole reason in the JSON.
    assert "planted failure" in out.stdout
    assert any("planted failure inside the check" in r["reason"] for r in json.loads(report.read_text())["results"])
    assert "1 passed" in out.stdout


@pytest.mark.parametrize("args", [["doctor", "--check", "no_such_check"], ["doctor", "--level", "extreme"],
                                  ["doctor", "--json", "/nonexistent-dir/r.json", "--check", "container"],
                                  ["frobnicate"], ["verify", "--bogus"], ["verify"], ["doctor", "--jobs", "many"]])
def test_bad_usage_exits_2_with_one_line(args: list[str]) -> None:
    out = run_opgate(args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("opgate: error: "), out.stderr  # no four-line usage block


def test_version_flag_prints_the_version() -> None:
    from opgate import __version__

    out = run_opgate(["--version"])
    assert out.returncode == 0 and out.stdout.strip() == f"opgate {__version__}", out.stdout + out.stderr


def test_unknown_check_error_names_it_and_lists_choices() -> None:
    out = run_opgate(["doctor", "--check", "no_such_check"])
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1
    assert "'no_such_check'" in lines[0] and "container" in lines[0]


def test_list_shows_builtin_checks() -> None:
    out = run_opgate(["doctor", "--list"])
    assert out.returncode == 0
    for name in ("gpu_inventory", "driver_runtime", "arch_support", "library_stack", "interposition",
                 "container", "mig_mps", "runtime_features"):
        assert f"doctor.{name}" in out.stdout


def test_full_doctor_on_this_machine_exits_0_or_reports_why(tmp_path: Path) -> None:
    """On a CPU runner every GPU check is skipped with a reason and the run exits 0."""
    path = tmp_path / "doctor.json"
    out = run_opgate(["doctor", "--json", str(path)])
    data = json.loads(path.read_text())
    for result in data["results"]:
        assert result["outcome"] != "error", result
        if result["outcome"] == "skipped":
            assert result["reason"]
    if not any(Path("/dev").glob("nvidia[0-9]*")):
        skipped = {r["check_id"] for r in data["results"] if r["outcome"] == "skipped"}
        assert {"doctor.gpu_inventory", "doctor.runtime_features"} <= skipped
        assert out.returncode == 0, out.stdout + out.stderr
