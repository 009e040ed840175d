"""scripts/gpu/autotune_ab_compare.py: the arms of scripts/gpu/autotune_ab.sh side by side, each runtime check's
median in both and their ratio; an unreadable report is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "autotune_ab_compare.py"


def _report(path: Path, median_us: float) -> Path:
    figure = {"key": "verify.runtime.median_time", "value": median_us, "unit": "us"}
    path.write_text(json.dumps({
        "duration_s": 120.0, "exit_code": 0, "counts": {"passed": 1},
        "results": [{"check_id": "verify.fla_swish.fla_swish.float32.runtime", "figures": [figure]}],
        "extra": {"engine": {"warm_ups": {"tasks": 3, "seconds": 40.0, "compiles": 30, "compile_s": 20.0}}}}))
    return path


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_the_arms_medians_side_by_side_with_their_ratio(tmp_path: Path) -> None:
    proc = _run(str(_report(tmp_path / "within.json", 500.0)), str(_report(tmp_path / "default.json", 450.0)))
    assert proc.returncode == 0, proc.stderr
    assert "within: report 120 s" in proc.stdout and "30 compiles in 20.0 s" in proc.stdout
    assert "verify.fla_swish.fla_swish.float32.runtime: 500.0 | 450.0 | 0.900" in proc.stdout


def test_an_unreadable_report_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "within.json"
    bad.write_text("{not json")
    proc = _run(str(bad), str(_report(tmp_path / "default.json", 450.0)))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "within.json: not a readable opgate JSON report" in proc.stderr
