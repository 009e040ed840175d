"""Triton specifics: IR artefacts from a real compiled kernel, and the interpreter's bf16 rounding."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests_verify_support import SRC


def test_ir_stages_of_a_kernel_compiled_for_sm90_are_kept_per_target(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget

    from opgate.verify.backends.triton_backend import save_compiled_kernel, target_label

    @triton.jit
    def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)

    source = triton.compiler.ASTSource(fn=scale, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32",
                                                             "BLOCK": "constexpr"}, constexprs={"BLOCK": 128})
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32))  # compiles without a GPU
    assert target_label(kernel) == "cuda-sm90"
    written = [Path(p) for p in save_compiled_kernel(kernel, tmp_path)]
    suffixes = {p.suffix for p in written}
    assert {".ttir", ".ttgir", ".llir", ".ptx", ".cubin"} <= suffixes
    assert all(p.parent.name == "cuda-sm90" for p in written)
    ptx = next(p for p in written if p.suffix == ".ptx").read_text()
    assert ".target sm_90" in ptx and ".entry scale" in ptx
    assert next(p for p in written if p.suffix == ".cubin").read_bytes()[:4] == b"\x7fELF"


def test_interpreter_bfloat16_casts_are_exact_after_opgate_patch():
    """TRITON_INTERPRET must be set before triton is imported: run in a fresh interpreter."""
    script = """
import torch, triton, triton.language as tl
from opgate.verify.backends.triton_backend import make_interpreter_bf16_casts_exact

@triton.jit
def cast(x_ptr, y_ptr, n, B: tl.constexpr):
    i = tl.arange(0, B)
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n).to(y_ptr.dtype.element_ty), mask=i < n)

def mismatches():
    x = torch.randn(1024, generator=torch.Generator().manual_seed(0))
    narrow = torch.empty(1024, dtype=torch.bfloat16)
    cast[(1,)](x, narrow, 1024, B=1024)
    sub = (torch.randn(1024, generator=torch.Generator().manual_seed(1)) * 1e-39).to(torch.bfloat16)
    wide = torch.empty(1024, dtype=torch.float32)
    cast[(1,)](sub, wide, 1024, B=1024)
    return int((narrow != x.to(torch.bfloat16)).sum()), int((wide != sub.float()).sum())

before = mismatches()
fixed = make_interpreter_bf16_casts_exact()
after = mismatches()
print(before[0], before[1], ",".join(fixed) or "none", after[0], after[1])
"""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(SRC), "TRITON_DEFAULT_FP_FUSION": "1"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    narrow_before, wide_before, fixed, narrow_after, wide_after = out.stdout.split()
    assert (narrow_after, wide_after) == ("0", "0")
    if fixed == "none":
        assert (narrow_before, wide_before) == ("0", "0")
        pytest.skip("this Triton's interpreter already converts bfloat16 exactly")
    assert int(narrow_before) > 100 or int(wide_before) > 100


@pytest.mark.slow
def test_an_autotuned_kernel_runs_its_first_config_under_the_interpreter(tmp_path):
    """Without opgate's patch Triton's autotuner raises '0 active drivers' on a CPU-only host at the first call."""
    import json

    from tests_verify_support import DATA, ROOT

    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("TRITON_INTERPRET", None)
    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "opgate", "verify", str(DATA / "autotuned_spec.py"), "--budget",
                           "quick", "--stages", "numerics", "--no-extras", "--json", str(report)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    [result] = [r for r in json.loads(report.read_text())["results"] if r["check_id"] == "verify.scale.triton.float32"]
    assert result["outcome"] == "passed"
    if result["extra"]["backend_facts"].get("interpreter"):
        assert "first config" in result["extra"]["backend_facts"]["autotune"]


@pytest.mark.gpu
def test_a_config_the_autotuner_may_never_pick_is_judged_and_named(tmp_path):
    """On a GPU the numerics run one config per autotune key (verify/backends/autotune_choice.py): the plan's sizes
    reach the planted config, and the failure says which config its case ran."""
    import json

    from opgate_testing import gpu_available
    from tests_verify_support import DATA, ROOT

    available, why = gpu_available()
    if not available:
        pytest.skip(f"GPU test: {why}")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("TRITON_INTERPRET", None)
    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "opgate", "verify", str(DATA / "autotuned_config_bug.py"), "--budget",
                           "quick", "--stages", "numerics", "--no-shrink", "--json", str(report)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    [result] = [r for r in json.loads(report.read_text())["results"] if r["check_id"] == "verify.scale.triton.float32"]
    assert result["outcome"] == "failed" and "ran the autotuned config BLOCK=256" in result["reason"], result["reason"]
    ran = result["extra"]["backend_facts"]["autotune"]["kernels"]["_scale_kernel"]
    assert ran["configs"] == 4 and len(set(ran["ran"].values())) >= 2
