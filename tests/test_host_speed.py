"""scripts/host_speed.py: the host's compile and CPU speed as one JSON line, written atomically; bad usage is one line
and exit 2. It needs Triton (it compiles for sm_90 without a GPU), which the test extras install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "host_speed.py"


def test_it_measures_the_host_and_writes_one_json_line(tmp_path: Path) -> None:
    pytest.importorskip("triton")
    out = tmp_path / "host_speed.json"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run([sys.executable, str(SCRIPT), "--parallel", "1", "--out", str(out)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "TMPDIR": str(scratch)})
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert figures == json.loads(done.stdout.strip())
    assert figures["compile_s"] > 0 and figures["sha256_s"] > 0 and figures["parallel"] == 1 and figures["triton"]
    assert figures["compile_parallel_s"] >= figures["compile_parallel_median_s"] > 0
    assert not list(tmp_path.glob("*.partial"))
    assert not list(scratch.iterdir())  # every compile's Triton cache removed with the script's folder


@pytest.mark.parametrize(("args", "says"), [(["--parallel", "0"], "--parallel 0: must be 1 or more"),
                                            (["--out", "/no/such/folder/x.json"], "its folder does not exist")])
def test_bad_usage_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1
