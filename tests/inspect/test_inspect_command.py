"""`opgate inspect` end to end through the CLI: tables, exit codes, JSON and JUnit reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from inspect_helpers import FIXTURES, REPO
from opgate.cli.main import main


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps table cells at 80 columns otherwise


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["inspect", *args])
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


def test_listing_only_exits_zero(capsys):
    code, out, _ = run_cli(capsys, str(FIXTURES / "multi.o"), str(FIXTURES / "compress_speed.o"))
    assert code == 0
    assert "sm_75, sm_80, sm_90" in out
    assert "compute_90 (ISA 9.0)" in out
    assert "lz4" in out and "zstd" in out


def test_unsupported_target_exits_one(capsys):
    code, out, _ = run_cli(capsys, str(FIXTURES / "sm90a.o"), "--targets", "h100,b200")
    assert code == 1
    assert "UNSUPPORTED" in out and "native" in out


def test_jit_only_is_a_warning_not_a_failure(capsys):
    code, out, _ = run_cli(capsys, str(FIXTURES / "multi.o"), "--targets", "b200@580.65.06")
    assert code == 0
    assert "JIT" in out and "first launch" in out


def test_missing_input_exits_two_with_one_line(capsys):
    code, out, err = run_cli(capsys, "/nonexistent/libfoo.so")
    assert code == 2
    assert err.strip().count("\n") == 0 and "no such file" in err


def test_damaged_input_exits_two_after_reporting_the_rest(capsys, tmp_path):
    bad = tmp_path / "bad.so"
    bad.write_bytes(b"\x7fELF" + b"\xff" * 100)
    code, out, _ = run_cli(capsys, str(bad), str(FIXTURES / "multi.o"), "--targets", "h100")
    assert code == 2
    assert "unreadable" in out and "multi.o" in out


def test_kernels_table(capsys):
    code, out, _ = run_cli(capsys, str(FIXTURES / "sm89.cubin"), "--kernels")
    assert code == 0
    assert "opgate_fixture::scale<float>" in out.replace("\n", "")
    assert "tile_sum" in out


def test_json_and_junit_reports(capsys, tmp_path):
    json_path, junit_path = tmp_path / "inspect.json", tmp_path / "inspect.xml"
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[[gpu]]\nmodel = "a100"\ndriver = "535.104.05"\n[[gpu]]\nmodel = "h100"\n')
    code, _, _ = run_cli(capsys, str(FIXTURES / "ptx_only.o"), str(FIXTURES / "multi.o"), "--fleet", str(fleet),
                         "--kernels", "--json", str(json_path), "--junit", str(junit_path))
    assert code == 1  # ptx_only.o's ISA 9.0 PTX cannot JIT on the 535 driver
    doc = json.loads(json_path.read_text())
    assert doc["schema_version"] == 2 and doc["verb"] == "inspect" and doc["exit_code"] == 1
    binaries = {Path(b["path"]).name: b for b in doc["extra"]["binaries"]}
    assert [e["arch"] for e in binaries["multi.o"]["entries"]] == ["sm_75", "sm_80", "sm_90", "sm_90"]
    assert len(binaries["multi.o"]["kernels"]) == 12
    statuses = {(Path(v["binary"]).name, v["target"]["label"]): v["status"] for v in doc["extra"]["verdicts"]}
    assert statuses == {("ptx_only.o", "a100"): "unsupported", ("ptx_only.o", "h100"): "jit",
                        ("multi.o", "a100"): "native", ("multi.o", "h100"): "native"}
    suite = ET.parse(junit_path).getroot().find("testsuite")
    assert suite.get("tests") == "4" and suite.get("failures") == "1"


def test_unknown_gpu_is_bad_usage(capsys):
    code, _, err = run_cli(capsys, str(FIXTURES / "multi.o"), "--targets", "h900")
    assert code == 2 and "h900" in err


def test_help_stays_lazy():
    """`opgate --help` must not import the inspect machinery (or pyelftools)."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    code = ("import sys, opgate.cli.main; "
            "print(any(m.startswith(('opgate.inspect', 'elftools', 'zstandard', 'lz4')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
    helped = subprocess.run([sys.executable, "-m", "opgate", "inspect", "--help"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert helped.returncode == 0 and "--targets" in helped.stdout and "--fleet" in helped.stdout


def test_long_kernel_lists_print_as_plain_columns(capsys, monkeypatch):
    import opgate.inspect.command as command

    monkeypatch.setattr(command, "RICH_KERNEL_ROWS", 2)
    code, out, _ = run_cli(capsys, str(FIXTURES / "multi.o"), "--kernels")
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("sm_")]
    assert len(rows) == 12  # 4 kernels x 3 cubins
    assert any(line.split()[:2] == ["sm_90", "10"] and line.endswith("tile_sum") for line in rows)
