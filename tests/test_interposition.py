"""The interposition check, tested for real: a library built here with the C compiler hijacks
cublasSgemm_v2 and cudaMalloc through LD_PRELOAD, in a child process with that environment."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from opgate_testing import child_pythonpath

from opgate.checks.base import CheckContext
from opgate.model.results import Outcome
from opgate.engine.runner import CheckTask, run_checks

HIJACK_SOURCE = """
int cublasSgemm_v2(void) { return 0; }
int cudaMalloc(void **ptr, unsigned long size) { (void)ptr; (void)size; return 0; }
"""


@pytest.fixture(scope="module")
def hijack_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the hijack library")
    folder = tmp_path_factory.mktemp("hijack")
    (folder / "hijack.c").write_text(HIJACK_SOURCE)
    library = folder / "libhijack.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(folder / "hijack.c")], check=True)
    return library


def run_interposition(extra_env: dict[str, str]):
    task = CheckTask("doctor.interposition", "interposition", "opgate.doctor.interposition:InterpositionCheck",
                     60.0, CheckContext(), env={"PYTHONPATH": child_pythonpath(), **extra_env})
    [result] = run_checks([task])
    return result


def test_preloaded_hijack_fails_naming_the_library(hijack_library: Path) -> None:
    result = run_interposition({"LD_PRELOAD": str(hijack_library)})
    assert result.outcome is Outcome.FAILED, result.reason
    assert str(hijack_library) in result.reason
    assert "cublasSgemm_v2" in result.reason and "cudaMalloc" in result.reason
    assert "LD_PRELOAD" in result.reason


def test_without_preload_the_check_passes() -> None:
    env = {"LD_PRELOAD": ""} if os.environ.get("LD_PRELOAD") else {}
    result = run_interposition(env)
    assert result.outcome is Outcome.PASSED, result.reason


def test_vendor_name_matching() -> None:
    from opgate.probes.interposition import how_it_got_there, is_vendor_provider

    assert is_vendor_provider("cublasSgemm_v2", "/x/nvidia/cu13/lib/libcublas.so.13")
    assert not is_vendor_provider("cublasSgemm_v2", "/x/libcublasLt.so.13")
    assert is_vendor_provider("cublasLtMatmul", "/x/libcublasLt.so.13")
    assert is_vendor_provider("cuLaunchKernel", "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.03")
    assert not is_vendor_provider("cudaMalloc", "/tmp/libhijack.so")
    assert how_it_got_there("/tmp/a.so", [], ["/tmp/a.so"]) == "/etc/ld.so.preload"
    assert how_it_got_there("/tmp/a.so", [], []).startswith("link order")
