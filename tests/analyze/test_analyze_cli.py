"""`opgate analyze` and `opgate occupancy` end to end: exit codes, JSON report, charts, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from opgate.reporting.json_report import read_json
from opgate.model.results import Outcome

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "analyze"


def opgate(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200")
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, "-m", "opgate", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)


@pytest.mark.slow
def test_analyze_writes_report_and_charts(tmp_path):
    report_path = tmp_path / "analyze.json"
    out = tmp_path / "report"
    done = opgate("analyze", str(DATA / "analyze_ops.py"), "--targets", "sm_80,h100", "--gpus", "h100,a100,v100",
                  "--json", str(report_path), "--out", str(out), "--jobs", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    report = read_json(report_path)
    assert report.verb == "analyze"
    ids = {r.check_id for r in report.results}
    for operator in ("vector_add", "softmax"):
        for target in ("sm_80", "sm_90"):
            assert f"analyze.portability.{operator}.triton.{target}" in ids
            assert f"analyze.occupancy.{operator}.triton.{target}" in ids
        for gpu in ("h100", "a100", "v100"):
            assert f"analyze.roofline.{operator}.{gpu}" in ids
    occupancy = next(r for r in report.results if r.check_id == "analyze.occupancy.softmax.triton.sm_80")
    assert occupancy.outcome is Outcome.PASSED
    assert any(f.name.endswith("occupancy") for f in occupancy.figures)
    roofline = next(r for r in report.results if r.check_id == "analyze.roofline.vector_add.h100")
    assert roofline.extra["points"][0]["bound"] == "memory"
    for name in ("roofline_vector_add.png", "roofline_vector_add.svg", "roofline_softmax.png",
                 "roofline_softmax.svg"):
        assert (out / name).is_file()
    assert "portability and occupancy" in done.stdout
    assert "exit code 0" in done.stdout
    assert report.extra["timings_s"]["portability"] > 0


@pytest.mark.slow
def test_analyze_exits_1_when_a_required_target_fails(tmp_path):
    report_path = tmp_path / "edge.json"
    done = opgate("analyze", str(DATA / "portability_edge_ops.py"), "--targets", "sm_86", "--stages", "portability",
                  "--json", str(report_path), "--out", str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    report = read_json(report_path)
    by_id = {r.check_id: r for r in report.results}
    assert by_id["analyze.portability.fp8_dot.triton.sm_86"].outcome is Outcome.FAILED
    assert by_id["analyze.portability.big_tile_matmul.triton.sm_86"].outcome is Outcome.FAILED
    assert "resource_overflow" in by_id["analyze.portability.big_tile_matmul.triton.sm_86"].reason
    assert by_id["analyze.portability.needs_gpu.triton.sm_86"].outcome is Outcome.FAILED
    assert "FAILED analyze.portability.fp8_dot.triton.sm_86" in done.stdout


@pytest.mark.parametrize("args, message", [
    (("analyze", "no/such/spec.py"), "spec file no/such/spec.py does not exist"),
    (("analyze", str(DATA / "analyze_ops.py"), "--targets", "hopper"), "target 'hopper' is neither"),
    (("analyze", str(DATA / "analyze_ops.py"), "--gpus", "h900"), "GPU 'h900' is not in opgate's catalogue"),
    (("analyze", str(DATA / "analyze_ops.py"), "--stages", "speed"), "--stages 'speed' is not a stage"),
    (("occupancy", "--threads", "128", "--registers", "32"), "give exactly one of --gpu"),
    (("occupancy", "--cc", "6.1", "--threads", "128", "--registers", "32"), "no SM limits"),
    (("occupancy", "--cc", "9.0", "--threads", "0", "--registers", "32"), "threads per block must be at least 1"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    done = opgate(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_occupancy_verb_table_json_and_exit_codes():
    table = opgate("occupancy", "--gpu", "h200", "--threads", "256", "--registers", "96")
    assert table.returncode == 0
    assert "registers 96 -> 80 per thread gives 50% more resident warps" in table.stdout
    as_json = opgate("occupancy", "--cc", "8.0", "--threads", "128", "--registers", "32",
                     "--dynamic-shared", "49152", "--json", "-")
    assert as_json.returncode == 0
    data = json.loads(as_json.stdout)
    assert data["active_blocks_per_sm"] == 3 and data["limiting_factors"] == ["shared_memory"]
    assert data["occupancy"] == pytest.approx(0.1875)
    too_big = opgate("occupancy", "--cc", "9.0", "--threads", "1024", "--registers", "65")
    assert too_big.returncode == 1
    assert "cannot be resident" in too_big.stdout


def test_help_lists_the_verbs_and_their_defaults():
    done = opgate("analyze", "--help")
    assert done.returncode == 0
    assert "sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120" in done.stdout.replace("\n", "").replace(" ", "")
    occupancy = opgate("occupancy", "--help")
    assert "--static-shared" in occupancy.stdout and "--dynamic-shared" in occupancy.stdout
