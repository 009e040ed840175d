"""A node whose CUDA sees no GPU while NVML lists it (a pod with CUDA_VISIBLE_DEVICES=""): what opgate makes of it.

Found by `opgate fleet doctor` over a Ray cluster on the H200 host (scripts/gpu/fleet_ray.sh, 2026-12-03): on its
head and CPU nodes every measured probe came back `error` ("check left the CUDA context unusable (cupy:
cudaErrorNoDevice)") over a verdict of `skipped`, and arch_support FAILED torch for "no SASS or PTX for sm_90
(built for )" because torch's arch list is empty where CUDA is not available.
"""

from __future__ import annotations

import sys
import types

import pytest

from opgate.checks.base import CheckContext
from opgate.doctor.arch_support import ArchSupportCheck
from opgate.engine.worker import cuda_context_fault
from opgate.model.results import Outcome
from opgate.probes import gpu_inventory, toolkit
from opgate.probes.gpu_inventory import GpuSnapshot, Inventory
from opgate.probes.toolkit import FrameworkBuild, ToolkitInfo, _compiled_arch_flags


class _CupyRuntimeError(RuntimeError):
    def __init__(self, status: int) -> None:
        super().__init__(f"cudaError {status}")
        self.status = status


def _fake_cupy(status: int) -> types.ModuleType:
    def device_count() -> int:
        raise _CupyRuntimeError(status)

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=device_count,
                                                                    deviceSynchronize=lambda: None))
    return cupy


@pytest.mark.parametrize("status, faulted", [(100, False), (35, False), (700, True)])
def test_no_device_is_not_a_poisoned_context(monkeypatch: pytest.MonkeyPatch, status: int, faulted: bool) -> None:
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(status))
    monkeypatch.delitem(sys.modules, "cuda.bindings.runtime", raising=False)
    assert bool(cuda_context_fault()) is faulted


def test_compiled_arch_flags_read_without_a_device() -> None:
    def flags() -> str:
        return "sm_80 sm_90 sm_100"

    assert _compiled_arch_flags(types.SimpleNamespace(_C=types.SimpleNamespace(_cuda_getArchFlags=flags))) == [
        "sm_80", "sm_90", "sm_100"]
    assert _compiled_arch_flags(types.SimpleNamespace(_C=types.SimpleNamespace())) == []


def _h200() -> GpuSnapshot:
    return GpuSnapshot(index=0, name="NVIDIA H200", uuid="GPU-0", compute_capability=(9, 0),
                       memory_total_bytes=None, mig_mode="disabled", persistence_mode="", ecc_enabled="",
                       ecc_uncorrected_volatile=None, retired_pages_pending="", remapped_rows=None,
                       throttle_reasons=[], pcie_gen_current=None, pcie_gen_max=None, pcie_width_current=None,
                       pcie_width_max=None)


@pytest.mark.parametrize("arch_list, outcome", [([], Outcome.PASSED), (["sm_80"], Outcome.FAILED),
                                                (["sm_80", "sm_90"], Outcome.PASSED)])
def test_arch_support_unknown_torch_list_is_no_finding(monkeypatch: pytest.MonkeyPatch, arch_list: list[str],
                                                       outcome: Outcome) -> None:
    monkeypatch.setattr(gpu_inventory, "collect_inventory", lambda: Inventory("580.0", 13000, [_h200()]))
    monkeypatch.setattr(toolkit, "toolkit_info", lambda: ToolkitInfo("/usr/local/cuda/bin/nvcc", (13, 0)))
    monkeypatch.setattr(toolkit, "torch_build", lambda: FrameworkBuild("torch", "2.11.0+cu130", "13.0", arch_list))
    result = ArchSupportCheck().evaluate(CheckContext(verb="doctor", level="basic", options={}))
    assert result.outcome is outcome, result.reason
    if not arch_list:
        assert any("unknown" in str(figure.value) for figure in result.figures)


@pytest.fixture()
def uncached_gpu_gate():
    """gpu_unavailable_reason is cached per process: each test here sees its own environment, and leaves none."""
    from opgate.gpu.probes import device

    device.gpu_unavailable_reason.cache_clear()
    yield device
    device.gpu_unavailable_reason.cache_clear()


@pytest.mark.parametrize("value, hidden", [("", True), (" ", True), ("-1", True), ("NoDevFiles", True),
                                           ("0", False), ("1,0", False), ("GPU-896c9e87", False),
                                           ("MIG-4f1e", False)])
def test_cuda_visible_devices_that_leave_cuda_no_device(monkeypatch: pytest.MonkeyPatch, value: str,
                                                        hidden: bool, uncached_gpu_gate) -> None:
    device = uncached_gpu_gate
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    monkeypatch.setattr(device, "_nvml_reason", lambda: None)  # NVML lists a GPU, as on the Ray nodes
    reason = device.gpu_unavailable_reason(runtime=False)
    assert (reason is not None) is hidden
    if hidden:
        assert "hides every GPU from CUDA" in reason


def test_require_gpu_fails_a_node_whose_cuda_sees_no_gpu(monkeypatch: pytest.MonkeyPatch, uncached_gpu_gate) -> None:
    """A pod without a GPU request on a GPU node must not be labelled ready under --require-gpu: its checks are
    skipped, and the skips must fail."""
    from opgate.cli.policy import REQUIRE_GPU_ID, apply_skip_policy
    from opgate.model.results import CheckResult, RunReport

    device = uncached_gpu_gate
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(device, "_nvml_reason", lambda: None)
    skipped = CheckResult("doctor.hbm_bandwidth", "HBM", Outcome.SKIPPED, "no usable CUDA device")
    report = apply_skip_policy(RunReport("doctor", (skipped,), "2026-12-03T00:00:00+00:00", 1.0), fail_on_skip=False,
                               require_gpu=True)
    outcomes = {r.check_id: r.outcome for r in report.results}
    assert outcomes == {"doctor.hbm_bandwidth": Outcome.FAILED, REQUIRE_GPU_ID: Outcome.FAILED}
