"""Where the float64 bound terms run (verify/bounds_device.py): the CPU unless the run has a GPU, one call of the
reference is slow on the CPU and the reference gives the CPU truth back there; the same bounds on either device."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import opgate  # noqa: E402
from opgate.verify import bounds_device  # noqa: E402
from opgate.verify.calibrate import CaseBounds  # noqa: E402
from opgate.verify.inputs import inputs_generated_once, plan_cases  # noqa: E402

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU: the terms cannot move there")


def _softmax_op(rows: int, cols: int) -> opgate.Operator:
    return opgate.Operator("softmax", reference=lambda x: torch.softmax(x, dim=-1),
                           inputs=[opgate.TensorSpec("x", ("M", "N"))], dims={"M": [rows], "N": [cols]},
                           dtypes=["float32"])


def test_without_the_runs_gpu_the_terms_stay_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(bounds_device.DEVICE_ENV, raising=False)
    bounds_device.use_gpu(False)
    x = torch.randn(512, 512, dtype=torch.float64)
    with bounds_device.placed(lambda v: v.exp(), [x], [x.exp()]) as (where, device):
        assert device == "cpu" and where[0] is x


def test_cpu_forced_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(bounds_device.DEVICE_ENV, "cpu")
    bounds_device.use_gpu(True)
    try:
        x = torch.randn(1024, 1024, dtype=torch.float64)
        with bounds_device.placed(lambda v: v.exp(), [x], [x.exp()]) as (_, device):
            assert device == "cpu"
    finally:
        bounds_device.use_gpu(False)


def test_one_call_of_the_reference_decides_whatever_the_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Size alone misjudged fla's chunked cumsum: a [1, 1, 65535] input (under MIN_GPU_ELEMENTS) padded to 4.2 M
    elements inside the reference; and a large case of a cheap reference costs less on a CPU thread than on the busy
    GPU of a library run. One call of the reference, in CPU time, decides."""
    import time

    monkeypatch.delenv(bounds_device.DEVICE_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # what a GPU host says; nothing runs there
    bounds_device.use_gpu(True)
    try:
        small = torch.randn(64, dtype=torch.float64)

        def burns_cpu(v):  # CPU time, not a sleep: a busy host's waiting is not the reference's cost
            until = time.thread_time() + 2 * bounds_device.SLOW_REFERENCE_S
            while time.thread_time() < until:
                pass
            return v * 2

        large = torch.zeros(bounds_device.MIN_GPU_ELEMENTS, dtype=torch.float64)
        # a process's first call of an op pays its lazy set-up, and its first call large enough to run on several
        # threads starts torch's thread pool (milliseconds of this thread's CPU beside a busy host: it made this test
        # fail once beside another pytest process)
        small * 2, large * 2
        assert not bounds_device._wanted(lambda v: v * 2, [small])
        assert bounds_device._wanted(burns_cpu, [small])
        assert not bounds_device._wanted(lambda v: time.sleep(0.05) or v, [small])  # waiting is no CPU cost
        assert not bounds_device._wanted(lambda v: 1 / 0, [small])  # the terms meet the error on the CPU
        # a large case of a cheap reference stays too: the call decides for every size
        assert not bounds_device._wanted(lambda v: v * 2, [large])
        assert bounds_device._wanted(burns_cpu, [large])
        for name in (bounds_device.SLOW_CALLS_ONLY, "auto"):  # the A/B's name and the default's say the same
            monkeypatch.setenv(bounds_device.DEVICE_ENV, name)
            assert not bounds_device._wanted(lambda v: v * 2, [large])
        # inputs so large that the call could only say yes move without it
        monkeypatch.setattr(bounds_device, "CERTAINLY_SLOW_ELEMENTS", bounds_device.MIN_GPU_ELEMENTS)
        assert bounds_device._wanted(lambda v: 1 / 0, [large])
        # OPGATE_BOUNDS_DEVICE=size, the rule before: size alone moves a large case
        monkeypatch.setattr(bounds_device, "CERTAINLY_SLOW_ELEMENTS", 1 << 24)
        monkeypatch.setenv(bounds_device.DEVICE_ENV, bounds_device.SIZE_RULE)
        assert bounds_device._wanted(lambda v: 1 / 0, [large])
        assert not bounds_device._wanted(lambda v: 1 / 0, [small])
    finally:
        bounds_device.use_gpu(False)


def test_agreement_refuses_a_reference_that_computes_something_else() -> None:
    x = torch.randn(64, 64, dtype=torch.float64)
    assert bounds_device._agrees(lambda v: v.exp(), [x], [x.exp()])
    assert not bounds_device._agrees(lambda v: v.exp() * (1 + 1e-6), [x], [x.exp()])
    assert not bounds_device._agrees(lambda v: v.exp()[:1], [x], [x.exp()])
    assert not bounds_device._agrees(lambda v: 1 / 0, [x], [x.exp()])
    nan_where = x.exp().clone()
    nan_where[0, 0] = float("nan")
    assert not bounds_device._agrees(lambda v: v.exp(), [x], [nan_where])


@needs_gpu
def test_the_bounds_on_the_gpu_equal_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(bounds_device.DEVICE_ENV, "cuda")  # any size
    monkeypatch.setenv("OPGATE_CACHE", "0")
    op = _softmax_op(64, 2048)
    case = plan_cases(op, "quick", 0)[0]
    from opgate.verify.calibrate import truth_and_baseline

    with inputs_generated_once():
        truth, _ = truth_and_baseline(op, case, "float32")
        bounds_device.use_gpu(False)
        monkeypatch.setenv(bounds_device.DEVICE_ENV, "cpu")
        on_cpu = CaseBounds.of(op, case, "float32", truth)
        monkeypatch.setenv(bounds_device.DEVICE_ENV, "cuda")
        bounds_device.use_gpu(True)
        try:
            on_gpu = CaseBounds.of(op, case, "float32", truth)
        finally:
            bounds_device.use_gpu(False)
    for a, b in zip(on_cpu.sensitivity, on_gpu.sensitivity):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-300)
    for a, b in zip(on_cpu.accumulation, on_gpu.accumulation):
        assert (a.rmse, a.quantile, a.fan_in) == pytest.approx((b.rmse, b.quantile, b.fan_in), rel=1e-9)
    for a, b in zip(on_cpu.logspace, on_gpu.logspace):
        assert (a.rmse, a.quantile) == pytest.approx((b.rmse, b.quantile), rel=1e-9)
    assert torch.cuda.memory_allocated() == 0  # nothing held once the terms are done


@needs_gpu
def test_a_reference_that_makes_cpu_tensors_keeps_its_terms_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(bounds_device.DEVICE_ENV, "cuda")
    bounds_device.use_gpu(True)
    try:
        x = torch.randn(256, 256, dtype=torch.float64)
        bias = torch.ones(256, dtype=torch.float64)  # a CPU tensor the reference closes over
        with bounds_device.placed(lambda v: v + bias, [x], [x + bias]) as (where, device):
            assert device == "cpu" and where[0].device.type == "cpu"
        with bounds_device.placed(lambda v: v * 2, [x], [x * 2]) as (where, device):
            assert device == "cuda" and where[0].device.type == "cuda"
    finally:
        bounds_device.use_gpu(False)


@needs_gpu
def test_a_gpu_another_run_keeps_past_the_wait_limit_leaves_the_terms_on_the_cpu(monkeypatch, tmp_path) -> None:
    from opgate.engine.gpu_guard import EXCLUSIVE, GpuLockRequest, keys_from_nvml

    monkeypatch.setenv("OPGATE_GPU_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("OPGATE_GPU_WAIT_S", "0.3")
    monkeypatch.setenv(bounds_device.DEVICE_ENV, "cuda")
    other_run = GpuLockRequest(keys_from_nvml(None), EXCLUSIVE, holder="a timing check of another run",
                               directory=tmp_path)
    assert other_run.poll()
    bounds_device.use_gpu(True)
    try:
        x = torch.randn(256, 256, dtype=torch.float64)
        with bounds_device.placed(lambda v: v * 2, [x], [x * 2]) as (where, device):
            assert device == "cpu" and where[0] is x
    finally:
        bounds_device.use_gpu(False)
        other_run.release()


def test_the_lock_waits_and_give_ups_are_counted_for_the_report(monkeypatch, tmp_path) -> None:
    """What placing the terms cost is in each plan's report (calibrate_plan): the cases that found the GPU's lock
    taken, those that then ran on the CPU, and the milliseconds they waited; the terms' own time is not a wait."""
    import time

    from opgate.engine.gpu_guard import EXCLUSIVE, GpuLockRequest, keys_from_nvml

    monkeypatch.setenv("OPGATE_GPU_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("OPGATE_GPU_WAIT_S", "0.3")
    monkeypatch.setattr(bounds_device, "COUNTS", dict.fromkeys(bounds_device.COUNTS, 0))
    monkeypatch.setattr(bounds_device, "_BUSY_UNTIL", [0.0])  # its give-up must not hold back later tests' waits
    with bounds_device._shared_gpu_lock() as held:  # free: no wait
        assert held
    assert bounds_device.COUNTS["gpu_lock_waits"] == 0
    measuring = GpuLockRequest(keys_from_nvml(None), EXCLUSIVE, holder="a runtime check", directory=tmp_path)
    assert measuring.poll()
    try:
        with bounds_device._shared_gpu_lock() as held:
            assert not held
            time.sleep(0.5)  # the terms, on the CPU
    finally:
        measuring.release()
    counts = bounds_device.COUNTS
    assert counts["gpu_lock_waits"] == counts["gpu_lock_gave_up"] == 1
    assert 250 <= counts["gpu_lock_wait_ms"] < 500


def test_after_a_give_up_the_next_cases_look_once_and_do_not_wait(monkeypatch, tmp_path) -> None:
    """softmax on the H200: its plans waited 2-2.4 s each for a lock a measurement kept, one second a case; after
    one give-up the next cases go to the CPU at once, and once the back-off is over they wait again."""
    import time

    from opgate.engine.gpu_guard import EXCLUSIVE, GpuLockRequest, keys_from_nvml

    monkeypatch.setenv("OPGATE_GPU_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("OPGATE_GPU_WAIT_S", "0.3")
    monkeypatch.setattr(bounds_device, "COUNTS", dict.fromkeys(bounds_device.COUNTS, 0))
    monkeypatch.setattr(bounds_device, "_BUSY_UNTIL", [0.0])
    measuring = GpuLockRequest(keys_from_nvml(None), EXCLUSIVE, holder="a runtime check", directory=tmp_path)
    assert measuring.poll()
    try:
        for _ in range(3):
            with bounds_device._shared_gpu_lock() as held:
                assert not held
        assert bounds_device.COUNTS["gpu_lock_waits"] == 3 and bounds_device.COUNTS["gpu_lock_wait_ms"] < 450
        bounds_device._BUSY_UNTIL[0] = time.perf_counter()  # the back-off is over: a case waits again
        began = time.perf_counter()
        with bounds_device._shared_gpu_lock() as held:
            assert not held
        assert time.perf_counter() - began >= 0.25
    finally:
        measuring.release()
    with bounds_device._shared_gpu_lock() as held:  # free again: taken at the first look
        assert held


@needs_gpu
def test_a_measurement_holding_the_gpu_sends_the_terms_to_the_cpu_within_a_second(monkeypatch, tmp_path) -> None:
    """A library's runtime checks hold the GPU alone for minutes while other files calibrate: the terms do not
    wait for it (the guard's own wait limit is half an hour)."""
    import time

    from opgate.engine.gpu_guard import EXCLUSIVE, GpuLockRequest, keys_from_nvml

    monkeypatch.setenv("OPGATE_GPU_LOCK_DIR", str(tmp_path))
    monkeypatch.delenv("OPGATE_GPU_WAIT_S", raising=False)
    monkeypatch.setenv(bounds_device.DEVICE_ENV, "cuda")
    measuring = GpuLockRequest(keys_from_nvml(None), EXCLUSIVE, holder="a runtime check", directory=tmp_path)
    assert measuring.poll()
    bounds_device.use_gpu(True)
    try:
        x = torch.randn(256, 256, dtype=torch.float64)
        began = time.perf_counter()
        with bounds_device.placed(lambda v: v * 2, [x], [x * 2]) as (where, device):
            assert device == "cpu" and where[0] is x
        assert time.perf_counter() - began < bounds_device.LOCK_WAIT_S + 1.0
    finally:
        bounds_device.use_gpu(False)
        measuring.release()


REPLACING_SPEC = '''
import torch
import opgate

_library = torch.library.Library("aten", "IMPL")  # as flag_gems.only_enable registers its Triton kernels
_library.impl("_test_serialization_subcmul", lambda a, b, alpha=1: a - alpha * b, "CUDA")

plain = opgate.Operator("plain", reference=lambda x: x * 2, inputs=[opgate.TensorSpec("x", ("N",))],
                        dims={"N": [4]}, dtypes=["float32"])
'''

CHILD = '''
import sys
import torch
from opgate.core.torch_kernels import replaced_gpu_kernels
from opgate.verify import bounds_device
from opgate.verify.loaded_specs import loaded_operators

torch.cuda.is_available = lambda: True  # what a GPU host says; nothing here runs on it
bounds_device.use_gpu(True)
x = torch.zeros(1 << 18, dtype=torch.float64)


def slow_neg(v):  # a reference whose one call costs the CPU over SLOW_REFERENCE_S: its terms would move
    import time
    until = time.thread_time() + 2 * bounds_device.SLOW_REFERENCE_S
    while time.thread_time() < until:
        pass
    return -v


before = (replaced_gpu_kernels(), bounds_device._wanted(slow_neg, [x]))
loaded_operators(sys.argv[1])
print(before, (replaced_gpu_kernels(), bounds_device._wanted(slow_neg, [x])))
'''


def test_a_spec_that_replaces_torchs_gpu_kernels_keeps_the_terms_on_the_cpu(tmp_path) -> None:
    """FlagGems registers its Triton kernels for aten operators on CUDA: the reference on the GPU would run the code
    under test, so its bound terms stay on the CPU (core/torch_kernels.py). In a child: the registration is global."""
    import os
    import subprocess
    import sys

    from tests_verify_support import SRC

    spec = tmp_path / "replacing.py"
    spec.write_text(REPLACING_SPEC)
    child = subprocess.run([sys.executable, "-c", CHILD, str(spec)], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(SRC)})
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip().splitlines()[-1] == (
        "([], True) (['_test_serialization_subcmul/CUDA'], False)"), child.stdout


RESTORING_CHILD = CHILD + '''
from opgate.core.torch_kernels import destroy_registrations, restore_native_kernels
print(restore_native_kernels(), (replaced_gpu_kernels(), bounds_device._wanted(slow_neg, [x])))
# the dispatcher serves torch's own kernel again once the overriding Library is destroyed (a CPU key: testable here)
library = torch.library.Library("aten", "IMPL")
library.impl("_test_serialization_subcmul", lambda a, b, alpha=1: a * 0 + 42, "CPU")
a, b = torch.ones(2), torch.ones(2)
replaced = torch.ops.aten._test_serialization_subcmul(a, b).tolist()
taken_back = destroy_registrations({"aten/_test_serialization_subcmul/CPU"})
print(replaced, taken_back, torch.ops.aten._test_serialization_subcmul(a, b).tolist())
'''


def test_a_calibration_process_takes_the_replaced_kernels_back_and_its_terms_may_use_the_gpu(tmp_path) -> None:
    """A calibration process runs references only: it destroys the Library objects that replaced aten's GPU kernels
    (core/torch_kernels.restore_native_kernels), the dispatcher serves torch's own kernels again, and its bound terms
    may move to the GPU like any other process's. In a child: the registration is global."""
    import os
    import subprocess
    import sys

    from tests_verify_support import SRC

    spec = tmp_path / "replacing.py"
    spec.write_text(REPLACING_SPEC)
    child = subprocess.run([sys.executable, "-c", RESTORING_CHILD, str(spec)], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "PYTHONPATH": str(SRC)})
    assert child.returncode == 0, child.stderr
    lines = child.stdout.strip().splitlines()
    assert lines[-2] == "['_test_serialization_subcmul/CUDA'] ([], True)", child.stdout
    assert lines[-1] == "[42.0, 42.0] ['aten/_test_serialization_subcmul/CPU'] [0.0, 0.0]", child.stdout


def test_a_library_that_also_replaced_a_cpu_kernel_is_left_alone() -> None:
    """restore_native_kernels destroys only Libraries whose aten kernels are all GPU ones it was asked for: one that
    also registered a CPU kernel (which the CPU truth may have used) keeps both."""
    import os
    import subprocess
    import sys

    from tests_verify_support import SRC

    child = '''
import torch
from opgate.core.torch_kernels import destroy_registrations
library = torch.library.Library("aten", "IMPL")
library.impl("_test_serialization_subcmul", lambda a, b, alpha=1: a * 0 + 42, "CPU")
library.impl("_test_serialization_subcmul", lambda a, b, alpha=1: a * 0 + 42, "CUDA")
print(destroy_registrations({"aten/_test_serialization_subcmul/CUDA"}),
      torch.ops.aten._test_serialization_subcmul(torch.ones(2), torch.ones(2)).tolist())
'''
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(SRC)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[] [42.0, 42.0]", done.stdout


@needs_gpu
def test_a_full_gpu_sends_the_terms_to_the_cpu_instead_of_failing_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the H100 host ten plans of a library run failed outright when their inputs could not be moved to a card
    the run's other processes had filled (13-26 MiB free): the terms are float64 arithmetic the CPU computes too."""
    from opgate.verify.calibrate import CACHE_COUNTS, truth_and_baseline

    monkeypatch.setenv(bounds_device.DEVICE_ENV, "cuda")
    monkeypatch.setenv("OPGATE_CACHE", "0")
    op = _softmax_op(1024, 4096)  # 32 MiB of float64 input
    case = plan_cases(op, "quick", 0)[0]
    filler = []
    with inputs_generated_once():
        truth, _ = truth_and_baseline(op, case, "float32")
        bounds_device.use_gpu(True)
        before = bounds_device.COUNTS["gpu_out_of_memory_placing"] + CACHE_COUNTS["gpu_out_of_memory"]
        try:
            while True:  # the card filled by this process, 16 MiB at a time
                filler.append(torch.empty(16 << 20, dtype=torch.uint8, device="cuda"))
        except torch.cuda.OutOfMemoryError:
            pass
        try:
            bounds = CaseBounds.of(op, case, "float32", truth)
        finally:
            filler.clear()
            torch.cuda.empty_cache()
            bounds_device.use_gpu(False)
    after = bounds_device.COUNTS["gpu_out_of_memory_placing"] + CACHE_COUNTS["gpu_out_of_memory"]
    assert after == before + 1 and len(bounds.sensitivity) == 1
