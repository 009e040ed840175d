"""scripts/gpu/windows_compare.py: two verify reports side by side, an interrupted one included (its unfinished
checks have a start and no end); anything but two readable reports is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "windows_compare.py"


def _report(timeline: dict, median_us: float) -> dict:
    check = "verify.swish.swish.float32.runtime"
    result = {"check_id": check, "outcome": "passed", "stage": "runtime",
              "figures": [{"key": "verify.runtime.median_time", "value": median_us}]}
    return {"duration_s": 300.0, "exit_code": 1, "results": [result], "extra": {"timeline": timeline}}


def test_an_interrupted_report_counts_its_unfinished_checks_instead_of_failing(tmp_path: Path) -> None:
    on = _report({"verify.swish.swish.float32": [1.0, 20.0], "verify.swish.swish.float32.runtime": [30.0, 31.0],
                  "verify.norm.norm.float16": [25.0]}, 101.0)
    off = _report({"verify.swish.swish.float32": [1.0, 21.0], "verify.swish.swish.float32.runtime": [40.0, 41.0]},
                  100.0)
    paths = []
    for name, report in (("on", on), ("off", off)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(report))
    done = subprocess.run([sys.executable, str(SCRIPT), *map(str, paths)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "1 checks unfinished" in done.stdout and "0 checks unfinished" in done.stdout
    assert "| verify.swish.swish.float32.runtime | 101.00 | 100.00 | 1.010 |" in done.stdout


def test_anything_but_two_readable_reports_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for args in ([], [str(tmp_path / "missing.json"), str(tmp_path / "missing.json")]):
        done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and not done.stdout
