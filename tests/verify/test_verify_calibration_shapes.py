"""Every spec shape the contract allows calibrates: `opgate verify` reaches a verdict (never exit 3, "a bug in opgate")
for inputs with no float entries, several requires-grad inputs (a bias gradient that depends on no input), conv
weights, outputs of different sizes and nn.Module references holding parameters (tests/data/verify/calibration_shapes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests_verify_support import DATA, ROOT, SRC

SHAPES = DATA / "calibration_shapes"

# spec file -> the operators (with their `.grad` twins) whose torch implementation must pass
EXPECTED = {
    "layer_norm_affine_grad.py": ["layer_norm_affine", "layer_norm_affine.grad"],
    "depthwise_conv.py": ["depthwise_conv", "depthwise_conv.grad"],
    "integer_inputs_only.py": ["token_frequencies"],
    "two_outputs.py": ["softmax_lse", "softmax_lse.grad"],
    "module_reference.py": ["rmsnorm_module", "rmsnorm_module.grad", "embedding_module", "step_quantizer"],
}


@pytest.fixture(scope="module")
def shapes_run(tmp_path_factory):
    """Every shape's spec file in one `opgate verify FOLDER` run (one worker pool, one calibration queue)."""
    out = tmp_path_factory.mktemp("calibration-shapes")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("TRITON_INTERPRET", None)
    report = out / "report.json"
    proc = subprocess.run([sys.executable, "-m", "opgate", "verify", str(SHAPES), "--budget", "quick",
                           "--stages", "numerics", "--no-extras", "--json", str(report), "--out", str(out / "art")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    results = {r["check_id"]: r for r in json.loads(report.read_text())["results"]} if report.is_file() else {}
    return proc, results


@pytest.mark.slow
@pytest.mark.parametrize("spec", sorted(EXPECTED))
def test_the_spec_shape_calibrates_and_its_correct_implementation_passes(spec, shapes_run):
    proc, results = shapes_run
    assert proc.returncode != 3, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for op in EXPECTED[spec]:
        assert results[f"verify.{op}.calibration"]["outcome"] == "passed"
        result = results[f"verify.{op}.torch.float32"]
        assert result["outcome"] == "passed", (op, result["reason"])
        assert result["extra"]["spec_file"] == str(SHAPES / spec)
