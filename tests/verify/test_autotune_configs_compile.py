"""benchmarks/autotune_configs_compile.py on the CPU: a kernel's configs compiled for sm_90 with Triton's ptxas (no
GPU), every config against those within the per-thread limit, and one line with exit 2 for a kernel it cannot load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]
KERNEL = textwrap.dedent("""
    import triton
    import triton.language as tl

    @triton.autotune(configs=[triton.Config({"B": 256}, num_warps=4), triton.Config({"B": 4096}, num_warps=1)],
                     key=["n"])
    @triton.jit
    def fill(out, n, B: tl.constexpr):
        offsets = tl.program_id(0) * B + tl.arange(0, B)
        tl.store(out + offsets, offsets.to(tl.float32), mask=offsets < n)
""")


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "tiny_kernels.py").write_text(KERNEL)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)])}
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "autotune_configs_compile.py"), *args],
                          env=env, capture_output=True, text=True, timeout=300)


def test_every_config_and_those_within_the_limit_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    proc = _run(tmp_path, "--kernel", "tiny_kernels:fill", "--pointers", "out", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    within = {row["config"]: row["within_limit"] for row in data["rows"]}
    assert within == {"B=256, num_warps=4, num_stages=3": True, "B=4096, num_warps=1, num_stages=3": False}
    assert data["within_s"] <= data["every_s"]
    assert "every config (Triton autotuning)" in proc.stdout and "within the limit" in proc.stdout


def test_a_kernel_it_cannot_load_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--kernel", "tiny_kernels:nothing_here", "--pointers", "out")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "tiny_kernels:nothing_here" in proc.stderr
