"""doctor.extension_binaries: loaded libraries judged against the local GPU with inspect's rules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inspect_helpers import FIXTURES, REPO
from opgate.checks.base import CheckContext
from opgate.doctor.extension_binaries import ExtensionBinariesCheck, loaded_shared_objects
from opgate.inspect.compat import Target
from opgate.model.results import Outcome


def test_maps_parsing(tmp_path):
    lib = tmp_path / "libx.so"
    lib.write_bytes(b"\x7fELF")
    maps = (f"7f0000000000-7f0000001000 r--p 00000000 08:01 123 {lib}\n"
            f"7f0000001000-7f0000002000 r-xp 00001000 08:01 123 {lib}\n"
            "7f0000003000-7f0000004000 rw-p 00000000 00:00 0 \n"
            "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n"
            f"7f0000005000-7f0000006000 r--p 00000000 08:01 9 {tmp_path}/gone.so (deleted)\n")
    assert loaded_shared_objects(maps) == [str(lib)]


def test_judge_fixture_library():
    check = ExtensionBinariesCheck()
    lib = str(FIXTURES / "libkernels.so")  # sm_80 SASS only
    ok = check.judge([lib, sys.executable], [Target("a100", 80, driver="580.65.06")], ["demo"])
    assert ok.outcome is Outcome.PASSED, ok.reason
    bad = check.judge([lib], [Target("h100", 90, driver="580.65.06")])
    assert bad.outcome is Outcome.FAILED and "libkernels.so" in bad.reason
    jit = check.judge([str(FIXTURES / "ptx_only.o")], [Target("h100", 90, driver="580.65.06")])
    assert jit.outcome is Outcome.WARNED and "JIT" in jit.reason
    none = check.judge([sys.executable], [Target("h100", 90)])
    assert none.outcome is Outcome.SKIPPED


def test_libraries_loaded_in_a_process_are_found():
    """Load the fixture library for real (ctypes, after its libcudart) and read it back from /proc/self/maps."""
    cudart = next((p for p in [*Path(sys.prefix).glob("lib/python3*/site-packages/nvidia/cu13/lib/libcudart.so.13"),
                               Path("/usr/local/cuda/lib64/libcudart.so.13")] if p.exists()), None)
    if cudart is None:
        pytest.skip("libcudart.so.13 not found (nvidia-cuda-runtime wheel or a CUDA 13 toolkit)")
    code = f"""
import ctypes, json
ctypes.CDLL({str(cudart)!r}, mode=ctypes.RTLD_GLOBAL)
ctypes.CDLL({str(FIXTURES / 'libkernels.so')!r})
from opgate.doctor.extension_binaries import ExtensionBinariesCheck, loaded_shared_objects
from opgate.inspect.compat import Target
paths = loaded_shared_objects()
result = ExtensionBinariesCheck().judge(paths, [Target("a10", 86, driver="580.65.06")])
print(json.dumps({{"paths": paths, "outcome": result.outcome.value, "reason": result.reason}}))
"""
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert str(FIXTURES / "libkernels.so") in found["paths"]
    assert found["outcome"] == "passed", found["reason"]  # sm_80 SASS runs on sm_86


def _has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@pytest.mark.skipif(_has_gpu(), reason="this host has a GPU: the skip path does not apply")
def test_without_gpu_the_check_is_skipped_with_the_reason():
    result = ExtensionBinariesCheck().run(CheckContext(options={"frameworks": []}))
    assert result.outcome is Outcome.SKIPPED
    assert "driver" in result.reason or "NVML" in result.reason or "nvidia-ml-py" in result.reason


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="no NVIDIA GPU/driver (NVML unavailable)")
def test_on_a_gpu_host_torch_extensions_are_judged():
    result = ExtensionBinariesCheck().run(CheckContext(options={"frameworks": ["torch"]}))
    assert result.outcome in (Outcome.PASSED, Outcome.WARNED, Outcome.FAILED, Outcome.SKIPPED), result.reason
    assert result.outcome is not Outcome.ERROR
