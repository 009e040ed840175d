"""The binary's CUDA runtime joins the verdict when a target names a driver (issue 14, item 9).

libkernels.so (nvcc 13.0, -cudart shared) needs libcudart.so.13: native SASS for sm_80, but CUDA 13's
minor-version-compatibility floor is the R580 branch, so an A100 on driver 535 cannot run it. A fresh
executable with the runtime linked statically gets the same floor from its toolkit release note.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from inspect_helpers import FIXTURES
from opgate.inspect.compat import NATIVE, UNSUPPORTED, judge, parse_targets
from opgate.inspect.demangle import demangle_all, itanium_part
from opgate.inspect.sources import inspect_paths


def _report(path: Path):
    (report,) = [r for r in inspect_paths([path]) if r.entries]
    return report


def test_a_cuda_13_runtime_is_unsupported_below_the_r580_branch():
    report = _report(FIXTURES / "libkernels.so")
    assert report.metadata["cuda_runtime"] == {"major": 13, "linkage": "dynamic",
                                               "evidence": "DT_NEEDED libcudart.so.13", "toolkit": "13.0"}
    old, new = parse_targets("a100@535.104.05")[0], parse_targets("a100@580.65.06")[0]
    below = judge(report, old)
    assert below.status == UNSUPPORTED
    assert "libcudart.so.13" in below.reason and ">= 580.65.06" in below.reason
    assert "minor version compatibility" in below.reason
    assert judge(report, new).status == NATIVE
    assert judge(report, parse_targets("a100")[0]).status == NATIVE  # no driver named: SASS alone decides


def test_files_without_a_runtime_get_no_floor():
    for name in ("sm89.cubin", "kernels.fatbin", "multi.o"):
        assert "cuda_runtime" not in _report(FIXTURES / name).metadata, name


@pytest.mark.slow
def test_a_statically_linked_runtime_takes_the_toolkit_floor(nvcc, tmp_path):
    app = tmp_path / "static_app"
    done = subprocess.run([nvcc, "-cudart", "static", "-o", str(app), str(FIXTURES / "main.cu"),
                           str(FIXTURES / "kernels.cu"), "-gencode", "arch=compute_80,code=sm_80"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = _report(app)
    runtime = report.metadata["cuda_runtime"]
    assert runtime["linkage"] == "static" and runtime["major"] >= 13
    assert judge(report, parse_targets("a100@535.104.05")[0]).status == UNSUPPORTED


def test_nv_static_kernel_names_are_demangled():
    name = "__nv_static_51_tmpxft_0000abcd_00000000_7_kernels_cpp1_ii_1a2b3c4d__Z4stepPfi"
    assert itanium_part(name) == "_Z4stepPfi"
    if demangle_all(["_Z4stepPfi"])["_Z4stepPfi"] == "_Z4stepPfi":
        pytest.skip("c++filt is not installed")
    assert demangle_all([name])[name] == "step(float*, int) [file-static]"
