"""Judgements of the doctor checks, on recorded facts (no GPU needed)."""

from __future__ import annotations

import pytest

from opgate.gpu.judge.arch_support import arch_coverage, toolkit_range
from opgate.gpu.judge.gpu_health import judge_gpu
from opgate.gpu.judge.library_stack import judge_loaded
from opgate.probes.gpu_inventory import GpuSnapshot
from opgate.probes.libraries import loaded_cuda_libraries, version_from_filename
from opgate.model.results import Outcome


def h200(**changes) -> GpuSnapshot:
    gpu = GpuSnapshot(index=0, name="NVIDIA H200", uuid="GPU-1", compute_capability=(9, 0),
                      memory_total_bytes=143771 * 2**20, mig_mode="disabled", persistence_mode="enabled",
                      ecc_enabled="enabled", ecc_uncorrected_volatile=0, retired_pages_pending="no",
                      remapped_rows={"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
                      throttle_reasons=["gpu_idle"], pcie_gen_current=1, pcie_gen_max=5,
                      pcie_width_current=16, pcie_width_max=16)
    for key, value in changes.items():
        setattr(gpu, key, value)
    return gpu


def test_healthy_idle_gpu_passes_even_with_downshifted_pcie_gen() -> None:
    assert judge_gpu(h200()) == (Outcome.PASSED, [])


@pytest.mark.parametrize(("changes", "outcome", "text"), [
    ({"ecc_uncorrected_volatile": 3}, Outcome.FAILED, "uncorrected ECC"),
    ({"remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": False, "failure": True}},
     Outcome.FAILED, "remapping failed"),
    ({"remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False}},
     Outcome.WARNED, "pending"),
    ({"retired_pages_pending": "yes"}, Outcome.WARNED, "retired pages"),
    ({"throttle_reasons": ["hw_thermal_slowdown"]}, Outcome.WARNED, "hw_thermal_slowdown"),
    ({"pcie_width_current": 8}, Outcome.WARNED, "x8 of x16"),
])
def test_gpu_health_findings(changes, outcome, text) -> None:
    got, findings = judge_gpu(h200(**changes))
    assert got is outcome
    assert any(text in f for f in findings)


MAPS_TWO_CUBLAS = """\
7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcublas.so.13
7f0000002000-7f0000003000 r-xp 00000000 08:01 2 /usr/local/cuda-12.4/lib64/libcublas.so.12.4.5.8
7f0000004000-7f0000005000 r-xp 00000000 08:01 3 /venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcudart.so.13
7f0000006000-7f0000007000 r--p 00000000 00:00 0 [heap]
"""


def test_two_versions_of_one_library_fail_and_major_mismatch_warns() -> None:
    libs = loaded_cuda_libraries(MAPS_TWO_CUBLAS)
    assert {lib.family for lib in libs} == {"cublas", "cudart"}
    outcome, findings = judge_loaded(libs)
    assert outcome is Outcome.FAILED
    assert any("two copies of cublas" in f for f in findings)
    assert any("CUDA 12, the runtime is CUDA 13" in f for f in findings)


def test_single_consistent_stack_passes() -> None:
    libs = loaded_cuda_libraries(MAPS_TWO_CUBLAS.splitlines()[0] + "\n" + MAPS_TWO_CUBLAS.splitlines()[2] + "\n")
    assert judge_loaded(libs) == (Outcome.PASSED, [])


@pytest.mark.parametrize(("name", "version"), [("libcublas.so.13.1.0.3", "13.1.0.3"), ("libcudnn.so.9", "9"),
                                               ("libcudart.so", "")])
def test_version_from_filename(name, version) -> None:
    assert version_from_filename(name) == version


@pytest.mark.parametrize(("cc", "arch_list", "expected"), [
    ((9, 0), ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"], ("sass", "sm_90")),
    ((8, 9), ["sm_80", "sm_86", "compute_86"], ("sass", "sm_86")),  # 8.6 SASS runs on 8.9
    ((10, 0), ["sm_80", "sm_90", "compute_90"], ("ptx", "compute_90")),
    ((9, 0), ["sm_90a"], ("sass", "sm_90a")),
    ((10, 0), ["sm_90a"], ("none", "")),  # arch-specific SASS runs only on its exact arch
    ((7, 0), ["sm_75", "sm_80"], ("none", "")),
])
def test_arch_coverage(cc, arch_list, expected) -> None:
    assert arch_coverage(cc, arch_list) == expected


def test_toolkit_range_cuda13_drops_volta() -> None:
    row = toolkit_range((13, 0))
    assert row["lowest_sm"] == 75 and "13.0" in row["source"]


# torch 2.13.0's CPU wheel, recorded (torch.__config__.show(), first lines)
TORCH_CONFIG = """PyTorch built with:
  - GCC 13.3
  - C++ Version: 202002
  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 for Intel(R) 64 architecture applications
  - Intel(R) MKL-DNN v3.12.0 (Git Hash 80afa71049cd69a3df32adcccb623b12cd7baa22)
  - OpenMP 201511 (a.k.a. OpenMP 4.5)
"""


def test_a_torch_that_bundles_onemkl_2024_2_is_warned_of_the_vml_first_call_race_on_x86_only() -> None:
    from opgate.gpu.judge.library_stack import judge_framework_builds
    from opgate.probes.framework_builds import BundledComponent, torch_components

    bundled = torch_components(TORCH_CONFIG, "2.13.0+cpu")
    assert bundled == [BundledComponent("torch", "2.13.0+cpu", "oneMKL", "2024.2")]
    outcome, findings, remedies = judge_framework_builds(bundled, "x86_64")
    assert outcome is Outcome.WARNED and "pytorch/pytorch#188792" in findings[0] and "oneMKL 2024.2" in findings[0]
    assert "once on one element" in remedies[0]
    assert judge_framework_builds(bundled, "aarch64")[0] is Outcome.PASSED  # the wheels for Arm bundle no oneMKL
    for version in ("2024.2.2", "2024.2.0"):
        assert judge_framework_builds([BundledComponent("torch", "2.9", "oneMKL", version)], "x86_64")[0] is \
            Outcome.WARNED
    for version in ("2025.0", "2024.20", "2024.1"):  # fixed, or another minor: not a prefix match
        assert judge_framework_builds([BundledComponent("torch", "2.9", "oneMKL", version)], "x86_64")[0] is \
            Outcome.PASSED
    assert torch_components("PyTorch built with:\n  - GCC 13.3\n", "2.13.0") == []  # no MKL: nothing to judge
