"""The measured GPU probes as doctor checks: standard level only, alone on the GPU, registered through the
entry-point group, and `skipped` with the reason on a machine without a usable GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from opgate.checks.base import CheckContext
from opgate.checks.registry import discover_checks
from opgate.doctor.gpu_checks import STANDARD_CHECKS
from opgate.gpu.probes.device import gpu_unavailable_reason
from opgate.model.results import Outcome
from opgate.engine.session import tasks_for

REPO = Path(__file__).resolve().parents[2]
NAMES = {"doctor.hbm_bandwidth", "doctor.l2_bandwidth", "doctor.host_links", "doctor.p2p",
         "doctor.launch_latency", "doctor.stream_priority", "doctor.event_timing"}
no_gpu = pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU is present: the checks measure")


def test_registered_under_their_names() -> None:
    registered = {spec.name: spec for spec in discover_checks()}
    assert NAMES <= set(registered)
    for cls in STANDARD_CHECKS:
        assert registered[cls.check_id].load() is cls


def test_standard_level_only_exclusive_and_time_boxed() -> None:
    for cls in STANDARD_CHECKS:
        assert cls.levels == ("standard",) and cls.exclusive, cls.check_id
        assert 0 < cls.timeout_s <= 120, cls.check_id


def test_basic_level_leaves_them_out_and_standard_runs_them_last() -> None:
    specs = [spec for spec in discover_checks() if spec.name.startswith("doctor.")]
    basic, _ = tasks_for(specs, CheckContext(level="basic"))
    assert not {t.check_id for t in basic} & NAMES
    standard, _ = tasks_for(specs, CheckContext(level="standard"))
    ids = [t.check_id for t in standard]
    assert NAMES <= set(ids)
    flags = [t.exclusive for t in standard]
    assert flags == sorted(flags), "exclusive checks must come after the ones that may run in parallel"


@no_gpu
def test_each_check_is_skipped_with_the_reason_here() -> None:
    reason = gpu_unavailable_reason()
    assert reason
    for cls in STANDARD_CHECKS:
        result = cls().run(CheckContext(level="standard"))
        assert result.outcome == Outcome.SKIPPED, (cls.check_id, result.reason)
        assert result.reason == reason


@no_gpu
def test_doctor_standard_cli_reports_the_skips(tmp_path: Path) -> None:
    report = tmp_path / "standard.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    args = [sys.executable, "-m", "opgate", "doctor", "--level", "standard", "--json", str(report)]
    for name in sorted(NAMES):
        args += ["--check", name.removeprefix("doctor.")]
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    results = {r["check_id"]: r for r in json.loads(report.read_text())["results"]}
    assert set(results) == NAMES
    for result in results.values():
        assert result["outcome"] == "skipped" and result["reason"], result
