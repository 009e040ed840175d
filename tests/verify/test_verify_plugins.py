"""Verify stages and backends are plugins: a third-party distribution (a dist-info on PYTHONPATH) adds a backend
and stages through the entry-point groups and `opgate verify` runs them, without any change to opgate."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from opgate_testing import child_pythonpath, run_opgate

PLUGINS = Path(__file__).resolve().parents[1] / "data" / "verify" / "plugins"


@pytest.fixture
def plugin_env(tmp_path: Path) -> dict[str, str]:
    dist = tmp_path / "opgate_planted_verify-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: opgate-planted-verify\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[opgate.verify.backends]\n"
        "planted_numpy = planted_verify_plugins:NumpyBackend\n"
        "[opgate.verify.stages]\n"
        "planted_shape = planted_verify_plugins:ShapeStage\n"
        "planted_needs_tool = planted_verify_plugins:NeedsMissingToolStage\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(PLUGINS), child_pythonpath()])}


def test_help_lists_the_plugin_stage(plugin_env: dict[str, str]) -> None:
    out = run_opgate(["verify", "--help"], env=plugin_env)
    assert "planted_shape" in " ".join(out.stdout.split()), out.stdout


def test_a_plugin_backend_and_stage_run_and_an_unmet_need_is_one_skipped_line(plugin_env: dict[str, str],
                                                                             tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    out = run_opgate(["verify", str(PLUGINS / "numpy_spec.py"), "--budget", "quick", "--no-extras", "--stages",
                      "numerics,planted_shape,planted_needs_tool", "--json", str(report)], env=plugin_env,
                     timeout=600)
    results = {r["check_id"]: r for r in json.loads(report.read_text())["results"]}
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    numpy_impl = results["verify.relu.numpy.float32"]
    assert numpy_impl["outcome"] == "passed" and "cpu (numpy)" in numpy_impl["reason"]
    assert results["verify.relu.torch.float32"]["outcome"] == "passed"
    for impl in ("torch", "numpy"):
        shape = results[f"verify.relu.{impl}.planted_shape"]
        assert shape["outcome"] == "passed" and "as the reference's" in shape["reason"]
    skipped = results["verify.relu.planted_needs_tool"]
    assert skipped["outcome"] == "skipped" and "opgate-no-such-tool" in skipped["reason"]


def test_an_unregistered_backend_is_a_spec_error_naming_the_registered_ones(tmp_path: Path) -> None:
    out = run_opgate(["verify", str(PLUGINS / "numpy_spec.py"), "--budget", "quick"])
    assert out.returncode == 2
    assert "planted_numpy" in out.stdout + out.stderr and "torch.compile" in out.stdout + out.stderr
