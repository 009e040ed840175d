"""The planted tail over-read of tests/data/verify/planted_memory.py must really read past the end in machine code.

The first version (`v = x[i]; if (i < n) y[i] = 2 * v;`) passed memcheck on the H200 (sixth H200 session, in the
history of docs/benchmarks.md): the compiler sinks a load whose value is used only under the bounds check, so the
SASS exits before the LDG and nothing is read out of bounds. The shipped pattern is a tiled kernel that stages its
inputs in shared memory before the check: the load stays ahead of the barrier and the exit. Built here by nvcc for
sm_90 and read back with cuobjdump -sass.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SPEC = Path(__file__).resolve().parents[1] / "data" / "verify" / "planted_memory.py"


def _tool(name: str, *wheel_globs: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for pattern in wheel_globs:
        for candidate in sorted(Path(sys.prefix).glob(pattern)):
            return str(candidate)
    return None


def _sass_of(function: str, listing: str) -> list[str]:
    """The instructions of one function in `cuobjdump -sass` output."""
    blocks = re.split(r"\n\s*Function : ", listing)
    body = next(block for block in blocks if block.startswith(function + "\n") or block.startswith(function + " "))
    return [line.split(";")[0].split("*/", 1)[-1].strip() for line in body.splitlines() if "/*0" in line]


def _first(instructions: list[str], pattern: str) -> int:
    return next(k for k, text in enumerate(instructions) if re.search(pattern, text))


def test_the_tiled_kernel_loads_before_its_bounds_check_and_the_plain_one_does_not(tmp_path: Path) -> None:
    nvcc = _tool("nvcc", "lib/python3*/site-packages/nvidia/cu*/bin/nvcc")
    cuobjdump = _tool("cuobjdump", "lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump")
    nvdisasm_dir = next((str(p.parent) for p in sorted(Path(sys.prefix).glob(
        "lib/python3*/site-packages/triton/backends/nvidia/bin/nvdisasm"))), None)
    if not nvcc or not cuobjdump or not (shutil.which("nvdisasm") or nvdisasm_dir):
        pytest.skip("nvcc, cuobjdump or nvdisasm not found (the nvidia-cuda-nvcc and cuobjdump wheels, Triton's "
                    "nvdisasm)")
    source = SPEC.read_text().split('SOURCE = r"""', 1)[1].split('"""', 1)[0]
    plain = ('extern "C" __global__ void load_before_check(const float* x, float* y, int n) {\n'
             '    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
             '    const float v = x[i];\n    if (i < n) y[i] = 2.0f * v;\n}\n')
    (tmp_path / "k.cu").write_text(source + plain)
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(nvcc).parent), os.environ.get("PATH", "")])}
    if nvdisasm_dir:
        env["NVDISASM_PATH"] = nvdisasm_dir
        env["PATH"] = os.pathsep.join([env["PATH"], nvdisasm_dir])
    subprocess.run([nvcc, "-arch=sm_90", "-cubin", "-O3", "-o", str(tmp_path / "k.cubin"), str(tmp_path / "k.cu")],
                   check=True, capture_output=True, env=env, timeout=300)
    listing = subprocess.run([cuobjdump, "-sass", str(tmp_path / "k.cubin")], check=True, capture_output=True,
                             text=True, env=env, timeout=120).stdout

    tiled = _sass_of("tile_before_check", listing)
    assert _first(tiled, r"^LDG") < _first(tiled, r"EXIT"), tiled  # every thread loads, the tail past the end
    assert not tiled[_first(tiled, r"^LDG")].startswith("@")

    masked = _sass_of("tile_masked", listing)
    load = next(text for text in masked if "LDG" in text)
    assert load.startswith("@"), masked  # the twin's load is predicated on i < n

    sunk = _sass_of("load_before_check", listing)
    assert _first(sunk, r"EXIT") < _first(sunk, r"LDG"), sunk  # the old "bug": the load sits under the check
