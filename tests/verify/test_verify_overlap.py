"""The engine overlaps the calibration with the checks (verify/calibrator.py): a dtype's numerics checks start as
soon as its plan is written, while the next dtype is still being calibrated; the report keeps the calibration
result first and the checks in stage order, and a reference that fails in the calibration thread is exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests_verify_support import DATA, ROOT, SRC


def _verify(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "opgate", "verify", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_a_dtypes_numerics_start_while_the_next_dtype_calibrates(tmp_path: Path) -> None:
    report_path = tmp_path / "r.json"
    began = time.time()
    proc = _verify(str(DATA / "slow_calibration_spec.py"), "--budget", "quick", "--no-extras", "--jobs", "2",
                   "--json", str(report_path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(report_path.read_text())
    # the timeline's zero in wall time, to align it with logs that keep wall time (the workers' memory log)
    assert began <= report["extra"]["timeline_origin_epoch"] <= time.time()
    spans = report["extra"]["engine"]["calibration_spans_s"]
    timeline = report["extra"]["timeline"]
    float32_start = timeline["verify.slow_relu.torch.float32"][0]
    assert spans["slow_relu float16"][1] - spans["slow_relu float16"][0] > 1.0  # the sleep makes it seconds
    assert float32_start < spans["slow_relu float16"][1], (float32_start, spans)
    ids = [r["check_id"] for r in report["results"]]
    assert ids[0] == "verify.slow_relu.calibration"
    assert ids.index("verify.slow_relu.torch.float32") < ids.index("verify.slow_relu.torch.float16")


def test_a_reference_that_fails_in_the_calibration_thread_is_exit_2_with_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "bad_reference.py"
    spec.write_text("import torch\nimport opgate\n"
                    "def ref(x):\n    if x.dtype == torch.float16:\n        raise ValueError('no half here')\n"
                    "    return x * 2\n"
                    "op = opgate.Operator('twice', reference=ref, inputs=[opgate.TensorSpec('x', ('N',))],\n"
                    "                     dims={'N': [8]}, dtypes=['float32', 'float16'])\n"
                    "op.implementation('torch', backend='torch')(lambda x: x * 2)\n")
    proc = _verify(str(spec), "--budget", "quick", "--no-extras", "--jobs", "2", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "no half here" in proc.stderr and "Traceback" not in proc.stderr
