"""The TVM backend run for real: the reference through TVM's Relax frontend, built for LLVM, in every dtype.

Skipped with the reason when apache-tvm is not installed (the `tvm` extra installs it). opgate's own part
is the conversion between torch and TVM (DLPack both ways, bfloat16 included) and turning a TVM import or
build failure of the reference into a `skipped` with TVM's message; TVM's numerics are TVM's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests_verify_support import ROOT, SRC

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tvm") is None,
                                reason="apache-tvm is not installed (pip install 'opgate[tvm]')")

SOFTMAX = ROOT / "examples" / "ops" / "softmax.py"
LAYERNORM = ROOT / "examples" / "ops" / "layernorm.py"
SCALED = ROOT / "tests" / "data" / "verify" / "tvm_symbolic_spec.py"

DIRECT_SCRIPT = r"""
import json, sys
from pathlib import Path
import torch
from opgate.verify.backends import prepare
from opgate.verify.backends.base import ImplementationChoice
from opgate.core.spec import load_spec_file

op = load_spec_file(Path(sys.argv[1]))[0]
choice = ImplementationChoice("tvm", "tvm", "reference")
out = {}
for dtype in ("float32", "float16", "bfloat16"):
    prepared = prepare(choice, op, dtype, Path("."))
    dt = getattr(torch, dtype)
    runs = []
    for shape in ((37, 1000), (1, 7), (64, 128)):  # dynamic shapes: one build serves every size
        x = (torch.randn(*shape, generator=torch.Generator().manual_seed(1)) * 3).to(dt)
        result = prepared.run([x], ["contiguous"], [(shape, dtype)])
        y = result.outputs[0]
        truth = torch.softmax(x.double(), dim=-1)
        runs.append({"dtype": str(y.dtype), "shape": list(y.shape), "max_abs_error": float((y.double() - truth).abs().max()),
                     "owns_memory": y.untyped_storage().data_ptr() != 0 and y.is_contiguous()})
    out[dtype] = {"runs": runs, "facts": prepared.facts, "device": prepared.device}
from opgate.model.errors import SkipCheck
layernorm = load_spec_file(Path(sys.argv[2]))[0]
try:
    prepare(choice, layernorm, "bfloat16", Path("."))
    out["layernorm_bfloat16"] = "built"
except SkipCheck as exc:
    out["layernorm_bfloat16"] = "skipped: " + str(exc)
# a reference using a dim's size in its arithmetic: the frontend rejects it dynamic, opgate fixes that dim
scaled = load_spec_file(Path(sys.argv[3]))[0]
prepared = prepare(choice, scaled, "bfloat16", Path("."))
errors = []
for shape in ((3, 8), (1, 8), (5, 16), (1, 1)):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    y = prepared.run([x], ["contiguous"], [(shape, "bfloat16")]).outputs[0]
    errors.append(float((y.double() - torch.softmax(x.double() / shape[1] ** 0.5, dim=-1)).abs().max()))
prepared.finish()
out["scaled_rows"] = {"shapes": prepared.facts["shapes"], "builds": prepared.facts["builds"], "errors": errors}
print(json.dumps(out))
"""


def test_tvm_backend_converts_every_dtype_through_dlpack_fixes_dims_tvm_cannot_keep_dynamic_and_skips_the_rest():
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run([sys.executable, "-c", DIRECT_SCRIPT, str(SOFTMAX), str(LAYERNORM), str(SCALED)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    # TVM's layer_norm has no bfloat16 kernel: the reference extra is skipped with TVM's own message
    layernorm = report.pop("layernorm_bfloat16")
    assert layernorm.startswith("skipped: TVM could not import/build") and "bfloat16" in layernorm, layernorm
    # 1/sqrt(N) of a dynamic N does not import: N is fixed, one build per size of N (8, 16, 1), M stays dynamic
    scaled = report.pop("scaled_rows")
    assert scaled["shapes"].startswith("dims N fixed") and scaled["builds"] == 3, scaled
    assert max(scaled["errors"]) < 5e-3, scaled
    # loose enough for TVM's own numerics (its Relax softmax accumulates float16 in float16: errors ~1e-2),
    # tight enough to catch a conversion that misreads bits (errors ~1, NaN, or a wrong dtype)
    allowed = {"float32": 1e-6, "float16": 5e-2, "bfloat16": 5e-2}
    for dtype, found in report.items():
        assert found["device"] == "llvm (cpu)" and found["facts"]["tensor_exchange"] == "DLPack"
        for run in found["runs"]:
            assert run["dtype"] == f"torch.{dtype}", (dtype, run)
            assert run["max_abs_error"] < allowed[dtype], (dtype, run)
            assert run["owns_memory"]
        assert [r["shape"] for r in found["runs"]] == [[37, 1000], [1, 7], [64, 128]]


def run_verify(*args: str, tmp_path) -> tuple[subprocess.CompletedProcess, dict]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run([sys.executable, "-m", "opgate", "verify", *args, "--stages", "numerics", "--budget", "quick",
                           "--json", str(tmp_path / "r.json")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    report = json.loads((tmp_path / "r.json").read_text())
    return proc, {r["check_id"]: r for r in report["results"]}


@pytest.mark.slow
def test_opgate_verify_runs_the_softmax_example_through_tvm_in_all_three_dtypes(tmp_path):
    proc, results = run_verify(str(SOFTMAX), "--impl", "tvm", tmp_path=tmp_path)
    for dtype in ("float32", "float16", "bfloat16"):
        result = results[f"verify.softmax.tvm.{dtype}"]
        # TVM computes here (no crash in opgate's conversion): judged, not errored or skipped
        assert result["outcome"] in ("passed", "warned", "failed"), (dtype, result["reason"])
        assert "raised" not in result["reason"] and "ScalarType" not in result["reason"], (dtype, result["reason"])
        assert result["extra"]["backend_facts"]["target"] == "llvm"
    assert results["verify.softmax.tvm.bfloat16"]["outcome"] in ("passed", "warned"), \
        results["verify.softmax.tvm.bfloat16"]["reason"]
    assert proc.returncode in (0, 1)
