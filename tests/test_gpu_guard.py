"""The GPU guard (opgate.engine.gpu_guard): a host-wide reader-writer lock per GPU, keyed by a fake device id here, held by
real processes (flock is per open file, so two processes are what it is for); the runner waits for it, reports the
wait, and turns a wait past the limit into an error; the CUDA-index-to-UUID mapping it keys by."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from opgate_testing import child_pythonpath

from opgate.checks.base import CheckContext
from opgate.engine.gpu_guard import EXCLUSIVE, SHARED, GpuGuard, GpuLockRequest
from opgate.probes.gpu_identity import PhysicalGpu, candidate_uuids
from opgate.model.results import Outcome
from opgate.engine.runner import CheckTask, run_checks

KEY = "GPU-fake-0000"
HOLD = """
import sys, time
from pathlib import Path
from opgate.engine.gpu_guard import GpuLockRequest
request = GpuLockRequest(("{key}",), "{mode}", "held by the test's other process", Path(r"{folder}"))
while not request.poll():
    time.sleep(0.01)
print("held", flush=True)
time.sleep({seconds})
request.release()
print("released", flush=True)
"""


@contextlib.contextmanager
def hold(folder: Path, mode: str, seconds: float) -> Iterator[subprocess.Popen[str]]:
    """Another process that takes the fake GPU's lock and holds it; entered once it holds it, ended (killed if it
    still runs) on exit."""
    code = HOLD.format(key=KEY, mode=mode, folder=folder, seconds=seconds)
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": child_pythonpath()}) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()


def wait_for(request: GpuLockRequest, limit_s: float = 20.0) -> float:
    started = time.monotonic()
    while not request.poll():
        assert time.monotonic() - started < limit_s, "the lock was never granted"
        time.sleep(0.01)
    return time.monotonic() - started


def test_an_exclusive_holder_in_another_process_keeps_shared_requests_waiting_until_it_ends(tmp_path: Path) -> None:
    with hold(tmp_path, EXCLUSIVE, 1.5) as other:
        mine = GpuLockRequest((KEY,), SHARED, "numerics", tmp_path)
        assert not mine.poll()
        assert mine.who_holds() == f"opgate pid {other.pid} (held by the test's other process)"
        assert wait_for(mine) > 0.8  # it waited for the other process to let go
        mine.release()


def test_shared_holders_in_two_processes_run_side_by_side(tmp_path: Path) -> None:
    with hold(tmp_path, SHARED, 1.0):
        mine = GpuLockRequest((KEY,), SHARED, "numerics", tmp_path)
        assert mine.poll()  # at once
        mine.release()


def test_a_waiting_writer_stops_new_readers_so_a_stream_of_them_cannot_starve_it(tmp_path: Path) -> None:
    with hold(tmp_path, SHARED, 1.5):
        writer = GpuLockRequest((KEY,), EXCLUSIVE, "recovery", tmp_path)
        assert not writer.poll()  # the reader holds it; the writer now holds the gate
        late_reader = GpuLockRequest((KEY,), SHARED, "numerics", tmp_path)
        assert not late_reader.poll()  # stopped at the gate although only readers hold the lock
        assert wait_for(writer) > 0.8
        assert not late_reader.poll()
        writer.release()
        assert late_reader.poll()
        late_reader.release()


def test_a_lock_lent_for_a_measurement_window_is_taken_back_past_a_waiting_writers_gate(tmp_path: Path) -> None:
    """A paused task's shared lock, lent for a measurement window, comes back as if it had been kept: another run's
    writer waiting at the gate would otherwise hold the whole run's paused work up for its queue of measurements."""
    with hold(tmp_path, SHARED, 1.5):
        writer = GpuLockRequest((KEY,), EXCLUSIVE, "another run's timing", tmp_path)
        assert not writer.poll()  # it holds the gate and waits for the readers
        lent = GpuLockRequest((KEY,), SHARED, "numerics", tmp_path)
        assert not lent.poll()  # a new reader stops at the gate
        assert lent.poll(past_the_gate=True)  # the holder it was does not
        assert not writer.poll()
        lent.release()
        writer.release()
    with hold(tmp_path, EXCLUSIVE, 1.0):  # a writer that holds the lock itself keeps it out either way
        assert not GpuLockRequest((KEY,), SHARED, "numerics", tmp_path).poll(past_the_gate=True)


def test_a_holder_that_dies_leaves_no_lock_behind(tmp_path: Path) -> None:
    with hold(tmp_path, EXCLUSIVE, 60) as other:
        os.kill(other.pid, signal.SIGKILL)
        other.wait(timeout=10)
    mine = GpuLockRequest((KEY,), EXCLUSIVE, "recovery", tmp_path)
    assert wait_for(mine, limit_s=5) < 5
    assert mine.who_holds() == ""  # the dead holder's note names no live process
    mine.release()


def guarded_task(exclusive: bool = False) -> CheckTask:
    return CheckTask(check_id="planted.passing", title="passing", target="planted_checks:PassingCheck", timeout_s=30,
                     context=CheckContext(verb="doctor"), env={"PYTHONPATH": child_pythonpath()},
                     exclusive=exclusive, uses_gpu=True)


def test_the_runner_waits_for_another_runs_recovery_stage_and_reports_the_seconds(tmp_path: Path) -> None:
    guard = GpuGuard(keys_for=lambda device: (KEY,), wait_s=60, directory=tmp_path)
    with hold(tmp_path, EXCLUSIVE, 1.5):  # another opgate run's recovery stage fills the GPU
        [result] = run_checks([guarded_task()], gpu_guard=guard)
    assert result.outcome is Outcome.PASSED
    [waited] = [f for f in result.figures if f.name == "waited for the GPU (another opgate run held it)"]
    assert waited.unit == "s" and 0.8 < waited.value < 30
    assert result.extra["gpu_guard"]["mode"] == SHARED and result.extra["gpu_guard"]["gpus"] == [KEY]
    [unhindered] = run_checks([guarded_task(exclusive=True)], gpu_guard=guard)
    assert unhindered.outcome is Outcome.PASSED and "gpu_guard" not in unhindered.extra


def test_a_wait_past_the_limit_is_an_error_naming_the_holder_not_a_hang(tmp_path: Path) -> None:
    guard = GpuGuard(keys_for=lambda device: (KEY,), wait_s=0.5, directory=tmp_path)
    with hold(tmp_path, EXCLUSIVE, 30) as other:
        started = time.monotonic()
        [result] = run_checks([guarded_task()], gpu_guard=guard)
    assert time.monotonic() - started < 10
    assert result.outcome is Outcome.ERROR
    assert result.reason.startswith(f"not run: its GPU ({KEY}) stayed held by opgate pid {other.pid} (held by the "
                                    "test's other process)")
    assert "OPGATE_GPU_WAIT_S" in result.remediation


def test_tasks_without_a_gpu_take_no_lock(tmp_path: Path) -> None:
    guard = GpuGuard(keys_for=lambda device: pytest.fail("asked for a GPU's key"), directory=tmp_path)  # type: ignore
    task = CheckTask(check_id="planted.passing", title="passing", target="planted_checks:PassingCheck", timeout_s=30,
                     context=CheckContext(verb="doctor"), env={"PYTHONPATH": child_pythonpath()})
    [result] = run_checks([task], gpu_guard=guard)
    assert result.outcome is Outcome.PASSED and not list(tmp_path.iterdir())


H200S = [PhysicalGpu(i, f"GPU-{i}aaa", "NVIDIA H200") for i in range(4)]
MIXED = [PhysicalGpu(0, "GPU-0aaa", "NVIDIA T400"), PhysicalGpu(1, "GPU-1aaa", "NVIDIA H200", ("MIG-1bbb",))]


def test_a_cuda_index_is_one_physical_gpu_whatever_the_visible_devices_say() -> None:
    assert candidate_uuids(0, None, H200S, pci_bus_order=False) == ("GPU-0aaa",)
    assert candidate_uuids(0, "2", H200S, False) == candidate_uuids(1, "0,2", H200S, False) == ("GPU-2aaa",)
    assert candidate_uuids(0, "GPU-3", H200S, False) == ("GPU-3aaa",)  # a unique UUID prefix
    assert candidate_uuids(0, "MIG-1bbb", MIXED, False) == ("GPU-1aaa",)  # a MIG instance locks its GPU
    assert candidate_uuids(1, "0,7,1", H200S, False) == ()  # CUDA stops at the entry it cannot use


def test_an_uncertain_index_locks_every_candidate() -> None:
    """CUDA's default FASTEST_FIRST order on mixed models need not be NVML's: lock them all."""
    assert candidate_uuids(0, None, MIXED, pci_bus_order=False) == ("GPU-0aaa", "GPU-1aaa")
    assert candidate_uuids(0, None, MIXED, pci_bus_order=True) == ("GPU-0aaa",)


def test_on_a_gpu_host_verify_tasks_take_the_guard_and_measuring_ones_take_it_alone(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    from opgate.core.spec import load_spec_file
    from opgate.verify import builtin_stages
    from opgate.verify.engine import VerifyRequest, chosen_stages, gpu_stage_tasks, select

    from opgate_testing import REPO

    monkeypatch.setattr(builtin_stages.SanitizerStage, "find_tool", lambda self, tool: "/bin/true")
    gelu = REPO / "examples" / "ops" / "gelu.py"
    request = VerifyRequest(spec_file=gelu, impls=["triton"], sanitizer_tools=["memcheck"])
    [sel] = select(load_spec_file(gelu), request, None)
    tasks, _ = gpu_stage_tasks(sel, request, tmp_path, gpu=True)
    modes = {t.check_id.rsplit(".", 1)[-1]: (t.uses_gpu, t.exclusive) for t in tasks}
    assert modes["runtime"] == (True, True) and modes["recovery"] == (True, True)
    assert modes["sanitizer"] == (True, False)  # shared: side by side with the numerics
    floors = {t.check_id.rsplit(".", 1)[-1]: t.slot_floor for t in tasks}
    assert floors["sanitizer"] == builtin_stages.SANITIZER_SLOT_FLOOR > 0  # slots of its own beside the numerics
    assert floors["runtime"] == floors["recovery"] == 0.0
    warm_ups = [t for t in tasks if t.check_id.endswith("_warm_up")]
    default_floor = builtin_stages.RuntimeStage.default_warm_up_slot_floor
    assert warm_ups and all(t.slot_floor == default_floor > 0 for t in warm_ups)
    assert all(t.slot_floor <= t.slot_share for t in warm_ups)  # a floor inside its share
    # the floor's A/B sets it through the environment, inside the share; anything else is one line, exit 2
    monkeypatch.setenv(builtin_stages.WARM_UP_SLOT_FLOOR_ENV, "0.25")
    tasks, _ = gpu_stage_tasks(sel, request, tmp_path, gpu=True)
    assert {t.slot_floor for t in tasks if t.check_id.endswith("_warm_up")} == {0.25}
    from opgate.model.errors import InputError

    for bad in ("four", "0.75", "-1"):
        monkeypatch.setenv(builtin_stages.WARM_UP_SLOT_FLOOR_ENV, bad)
        with pytest.raises(InputError, match="OPGATE_WARM_UP_SLOT_FLOOR=.*between 0 and 0.5"):
            gpu_stage_tasks(sel, request, tmp_path, gpu=True)
    with pytest.raises(InputError, match="OPGATE_WARM_UP_SLOT_FLOOR"):  # before any work, not minutes into a run
        chosen_stages(request)


def test_a_warm_up_holds_the_gpu_shared_until_it_ends_and_is_skipped_while_another_run_has_it(tmp_path: Path) -> None:
    """A CUDA context created while another run's recovery stage fills the card fails and spoils its worker."""
    from opgate.engine.runner import WarmPool

    guard = GpuGuard(keys_for=lambda device: (KEY,), wait_s=60, directory=tmp_path / "locks")
    (tmp_path / "work").mkdir()
    warm_up = dataclasses.replace(guarded_task(), check_id="planted.spare_warm_up")
    pool = WarmPool(tmp_path / "work", limit=4, guard=guard)
    try:
        with hold(tmp_path / "locks", EXCLUSIVE, 30):
            pool.start_spare(warm_up)
            assert pool.spares == []  # skipped: only a head start, not worth a wait
        pool.start_spare(warm_up)
        assert len(pool.spares) == 1
        writer = GpuLockRequest((KEY,), EXCLUSIVE, "another run's recovery", tmp_path / "locks")
        assert not writer.poll()  # the warm-up (a fresh interpreter) is still starting, and holds it shared
        started = time.monotonic()
        while not writer.poll():  # ... until its result is written
            pool.settle()
            assert time.monotonic() - started < 60
            time.sleep(0.02)
        writer.release()
        pool.start_spare(warm_up)
        [mine] = run_checks([guarded_task(exclusive=True)], pool=pool, gpu_guard=guard)
        assert mine.outcome is Outcome.PASSED and "gpu_guard" not in mine.extra  # its own run's warm-up gave way
    finally:
        pool.close()


def test_physical_gpus_come_from_nvml_with_their_mig_instances(monkeypatch) -> None:
    import opgate.probes.gpu_identity as identity

    class FakeNvml:
        def nvmlDeviceGetCount(self) -> int:
            return 2

        def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[str, int]:
            return ("gpu", index)

        def nvmlDeviceGetUUID(self, handle: tuple[str, int]) -> bytes:
            return f"{'GPU' if handle[0] == 'gpu' else 'MIG'}-{handle[1]}abc".encode()

        def nvmlDeviceGetName(self, handle: tuple[str, int]) -> str:
            return "NVIDIA H200"

        def nvmlDeviceGetMaxMigDeviceCount(self, handle: tuple[str, int]) -> int:
            return 1 if handle[1] == 1 else 0

        def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: tuple[str, int], slot: int) -> tuple[str, int]:
            return ("mig", 7)

    monkeypatch.setattr(identity, "nvml_session", lambda: contextlib.nullcontext(FakeNvml()))
    assert identity.physical_gpus() == [PhysicalGpu(0, "GPU-0abc", "NVIDIA H200"),
                                        PhysicalGpu(1, "GPU-1abc", "NVIDIA H200", ("MIG-7abc",))]


def test_without_nvml_every_run_locks_one_common_key(monkeypatch) -> None:
    import opgate.probes.gpu_identity as identity
    from opgate.engine.gpu_guard import UNIDENTIFIED, keys_from_nvml
    from opgate.probes.nvml import NotAvailable

    monkeypatch.setattr(identity, "physical_gpus", lambda: NotAvailable("no NVIDIA driver"))
    assert keys_from_nvml(0) == keys_from_nvml(None) == (UNIDENTIFIED,)
