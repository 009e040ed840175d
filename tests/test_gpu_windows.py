"""Measurement windows (engine/gpu_windows.py, engine/gpu_pause.py): a measurement runs while the run's side-by-side
GPU work waits at a pause point or compiles, with real warm workers and the GPU guard's real locks on a fake GPU key;
the window's state machine on its own with a fake clock."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import pytest

from opgate_testing import child_pythonpath

from opgate.checks.base import CheckContext
from opgate.engine import gpu_pause, gpu_windows
from opgate.engine.gpu_guard import GpuGuard
from opgate.engine.gpu_windows import CLOSED, OPEN, MeasurementWindows
from opgate.engine.runner import CheckTask, run_checks
from opgate.model.results import Outcome

KEY = "GPU-fake-windows"


def gpu_task(name: str, cls: str, worker: str, exclusive: bool = False, pausable: bool = False,
             **options: float) -> CheckTask:
    return CheckTask(check_id=f"planted.{name}", title=name, target=f"planted_checks:{cls}", timeout_s=60,
                     context=CheckContext(verb="doctor", options=dict(options)),
                     env={"PYTHONPATH": child_pythonpath()}, worker=worker, exclusive=exclusive, uses_gpu=True,
                     pausable=pausable, measures_in_windows=exclusive)


@pytest.fixture(autouse=True)
def patient_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's first pause point comes after its start-up, which a loaded CI machine can stretch past 2 s; and the
    test machine's cores are busy with other tests (the idle-core guard has its own test)."""
    monkeypatch.setattr(gpu_windows, "QUIET_WAIT_S", 20.0)
    monkeypatch.setattr(gpu_windows, "MIN_IDLE_CORES", 0.0)
    monkeypatch.setenv(gpu_windows.ENV, "1")  # opt-in (gpu_windows.enabled)


def run(tasks: list[CheckTask], tmp_path: Path) -> dict[str, Any]:
    guard = GpuGuard(keys_for=lambda device: (KEY,), wait_s=60, directory=tmp_path / "locks")
    return {r.check_id: r for r in run_checks(tasks, jobs=2, gpu_guard=guard)}


def test_a_measurement_runs_while_the_side_by_side_work_waits_at_a_pause_point(tmp_path: Path) -> None:
    work = gpu_task("work", "PausableWorkCheck", "side", pausable=True, seconds=4.0)
    measure = gpu_task("measure", "StampCheck", "timing", exclusive=True, seconds=0.3)
    results = run([work, measure], tmp_path)
    assert results["planted.work"].outcome is Outcome.PASSED and results["planted.measure"].outcome is Outcome.PASSED
    began, ended = results["planted.measure"].extra["span"]
    waits = results["planted.work"].extra["waits"]
    # the measurement ran inside one of the work's waits: nothing of the work's ran beside it
    assert any(start <= began and ended <= end for start, end in waits), (began, ended, waits)
    assert results["planted.work"].extra["paused_s"] >= 0.3


def test_a_measurement_runs_while_the_side_by_side_work_compiles(tmp_path: Path) -> None:
    work = gpu_task("work", "PausableWorkCheck", "side", pausable=True, compile_s=3.0, seconds=0.5)
    measure = gpu_task("measure", "StampCheck", "timing", exclusive=True, seconds=0.3)
    results = run([work, measure], tmp_path)
    began, ended = results["planted.measure"].extra["span"]
    compile_began, compile_ended = results["planted.work"].extra["compile_span"]
    assert compile_began <= began and ended <= compile_ended  # measured during the compile


@pytest.mark.parametrize("why", ["not pausable", "windows off"])
def test_without_a_window_the_measurement_waits_for_the_gpu_to_be_free(tmp_path: Path, why: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    if why == "windows off":
        monkeypatch.setenv(gpu_windows.ENV, "0")
    work = gpu_task("work", "PausableWorkCheck", "side", pausable=why != "not pausable", seconds=2.0)
    measure = gpu_task("measure", "StampCheck", "timing", exclusive=True, seconds=0.1)
    results = run([work, measure], tmp_path)
    assert results["planted.work"].extra["waits"] == []
    assert results["planted.work"].extra["paused_s"] == 0.0
    assert results["planted.measure"].outcome is Outcome.PASSED


# -- the state machine alone -------------------------------------------------------------------------------------

@dataclasses.dataclass
class FakeProc:
    pid: int


@dataclasses.dataclass
class FakeSlot:
    task: CheckTask
    index: int
    worker: Any = None
    paused_s: float = 0.0


class FakeClaims:
    def __init__(self) -> None:
        self.lent: set[int] = set()
        self.refuse_retake = False
        self.withdrawn = 0

    def lend(self, index: int) -> None:
        self.lent.add(index)

    def withdraw_exclusive(self) -> None:
        self.withdrawn += 1

    def retake(self, index: int) -> bool:
        if self.refuse_retake:
            return False
        self.lent.discard(index)
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def windows_with(tmp_path: Path) -> tuple[MeasurementWindows, Clock, FakeClaims, list[FakeSlot], CheckTask]:
    clock = Clock()
    windows = MeasurementWindows(tmp_path / "pause", clock=clock, cores=gpu_windows.IdleCores(clock, tmp_path / "no"))
    side = gpu_task("work", "PausableWorkCheck", "side", pausable=True)
    slot = FakeSlot(side, 0, worker=type("W", (), {"proc": FakeProc(4242)})())
    measure = gpu_task("measure", "StampCheck", "timing", exclusive=True)
    return windows, clock, FakeClaims(), [slot], measure


def test_a_window_gives_up_when_the_work_does_not_quiet_down_and_tries_again_later(tmp_path: Path) -> None:
    windows, clock, claims, running, measure = windows_with(tmp_path)
    windows.step(running, claims, lambda: measure)
    assert windows.flag.exists() and windows.holds_side_by_side() and not windows.is_open()
    clock.now += windows.quiet_wait_s + 0.1  # no quiet marker came
    windows.step(running, claims, lambda: measure)
    assert windows.state == CLOSED and not windows.flag.exists() and windows.stats["gave_up"] == 1
    windows.step(running, claims, lambda: measure)  # not again before the gap
    assert windows.state == CLOSED
    clock.now += gpu_windows.MIN_GAP_S
    windows.step(running, claims, lambda: measure)
    assert windows.flag.exists()
    clock.now += windows.quiet_wait_s + 0.1  # gives up again: the next try waits twice as long
    windows.step(running, claims, lambda: measure)
    clock.now += gpu_windows.MIN_GAP_S
    windows.step(running, claims, lambda: measure)
    assert windows.state == CLOSED
    clock.now += gpu_windows.MIN_GAP_S
    windows.step(running, claims, lambda: measure)
    assert windows.flag.exists() and windows.stats["gave_up"] == 2


def test_a_window_opens_once_every_task_is_quiet_and_gives_their_time_back(tmp_path: Path) -> None:
    windows, clock, claims, running, measure = windows_with(tmp_path)
    windows.step(running, claims, lambda: measure)
    marker = gpu_pause.quiet_marker(windows.folder, 4242)
    marker.write_text(gpu_pause.PAUSED)
    windows.step(running, claims, lambda: measure)
    assert windows.state == OPEN and windows.paused() == {0} and claims.lent == {0}
    clock.now += 3.0
    windows.step(running, claims, lambda: None)  # nothing left to measure: the window closes
    assert windows.state == CLOSED and not windows.flag.exists() and claims.lent == set()
    assert claims.withdrawn == 1  # a measurement still waiting for the lock lets go of its gate
    assert running[0].paused_s == pytest.approx(3.0)
    assert windows.stats["opened"] == 1 and windows.stats["seconds_open"] == pytest.approx(3.0)


def test_a_window_keeps_the_flag_until_the_paused_tasks_have_their_locks_again(tmp_path: Path) -> None:
    windows, clock, claims, running, measure = windows_with(tmp_path)
    windows.step(running, claims, lambda: measure)
    gpu_pause.quiet_marker(windows.folder, 4242).write_text(gpu_pause.PAUSED)
    windows.step(running, claims, lambda: measure)
    claims.refuse_retake = True  # another opgate run's measurement has the GPU now
    clock.now += gpu_windows.LONGEST_S + 1
    windows.step(running, claims, lambda: measure)
    assert windows.flag.exists() and windows.holds_side_by_side() and not windows.is_open()
    claims.refuse_retake = False
    windows.step(running, claims, lambda: measure)
    assert windows.state == CLOSED and not windows.flag.exists()


def test_no_window_beside_a_task_that_cannot_pause(tmp_path: Path) -> None:
    windows, clock, claims, running, measure = windows_with(tmp_path)
    sanitizer = FakeSlot(gpu_task("sanitizer", "PassingCheck", ""), 1)  # a fresh process per task: never pauses
    windows.step([*running, sanitizer], claims, lambda: measure)
    assert windows.state == CLOSED and not windows.flag.exists()


def test_pause_points_do_nothing_outside_a_pausable_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gpu_pause.PAUSE_DIR_ENV, str(tmp_path))
    gpu_pause.flag_path(tmp_path).write_text("1")  # a window is open
    gpu_pause.begin_task(False)  # a measurement: it must not wait for its own window
    gpu_pause.pause_point()
    gpu_pause.compile_began()
    gpu_pause.compile_ended()  # none of these waited (the test would hang) or marked this process quiet
    assert not (tmp_path / gpu_pause.QUIET).exists() or not any((tmp_path / gpu_pause.QUIET).iterdir())
    assert gpu_pause.paused_seconds() == 0.0
    gpu_pause.end_task()


def test_a_window_whose_measurement_cannot_take_the_lock_closes_and_the_work_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process holds the GPU's lock shared (another run's numerics, a calibration's bound terms): the window
    opens, the measurement waits for the lock, the window closes after LONGEST_S and lets go of the lock's gate, so
    the paused work takes its shared lock again instead of waiting on the measurement forever."""
    from test_gpu_guard import KEY as HELD_KEY, hold

    monkeypatch.setattr(gpu_windows, "LONGEST_S", 1.0)
    guard = GpuGuard(keys_for=lambda device: (HELD_KEY,), wait_s=60, directory=tmp_path / "locks")
    work = gpu_task("work", "PausableWorkCheck", "side", pausable=True, seconds=5.0)
    measure = gpu_task("measure", "StampCheck", "timing", exclusive=True, seconds=0.1)
    started = time.monotonic()
    with hold(tmp_path / "locks", "shared", 4.0):
        results = {r.check_id: r for r in run_checks([work, measure], jobs=2, gpu_guard=guard)}
    assert results["planted.work"].outcome is Outcome.PASSED and results["planted.measure"].outcome is Outcome.PASSED
    assert time.monotonic() - started < 30  # nobody waited for the GPU guard's limit


def test_idle_cores_come_from_proc_stat_deltas_and_hold_a_window_back_on_a_busy_host(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_windows, "MIN_IDLE_CORES", 2.0)
    monkeypatch.setattr(gpu_windows.os, "cpu_count", lambda: 16)
    stat = tmp_path / "stat"
    clock = Clock()
    cores = gpu_windows.IdleCores(clock, stat)

    def jiffies(busy: int, idle: int) -> None:  # user nice system idle iowait irq softirq steal
        stat.write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\n")

    jiffies(1000, 1000)
    assert cores.sample() is None  # one reading: nothing to compare yet
    clock.now += 1.5
    jiffies(2500, 1100)  # 1,500 busy and 100 idle jiffies since: 1/16 idle, one core
    assert cores.sample() == pytest.approx(1.0)
    windows = MeasurementWindows(tmp_path / "pause", clock=clock, cores=cores)
    side = gpu_task("work", "PausableWorkCheck", "side", pausable=True)
    running = [FakeSlot(side, 0, worker=type("W", (), {"proc": FakeProc(4242)})())]
    measure = gpu_task("measure", "StampCheck", "timing", exclusive=True)
    windows.step(running, FakeClaims(), lambda: measure)
    assert windows.state == CLOSED and not windows.flag.exists()  # the compiles would take the measurement's core
    clock.now += 1.5
    jiffies(3300, 1900)  # half idle: eight cores
    windows.step(running, FakeClaims(), lambda: measure)
    assert windows.flag.exists()


def test_the_next_window_waits_as_long_as_the_last_was_open_and_a_window_without_a_measurement_backs_off(
        tmp_path: Path) -> None:
    """The side-by-side work keeps at least half the GPU's time: the gap after a window is its length (it was the
    few milliseconds of retaking the locks); a window in which nothing was measured backs off like one that gave up."""
    windows, clock, claims, running, measure = windows_with(tmp_path)
    marker = gpu_pause.quiet_marker(windows.folder, 4242)
    windows.step(running, claims, lambda: measure)
    marker.write_text(gpu_pause.PAUSED)
    windows.step(running, claims, lambda: measure)
    assert windows.is_open()
    windows.started(measure)  # a measurement ran in it ...
    clock.now += 30.0  # ... for 30 s (a window stays open while its measurement runs)
    assert windows.pausing_s(0) == pytest.approx(30.0)  # the paused task's time limit leaves it out meanwhile
    windows.step(running, claims, lambda: None)
    assert windows.state == CLOSED and windows.stats["gave_up"] == 0
    assert windows.not_before == pytest.approx(clock.now + 30.0) and running[0].paused_s == pytest.approx(30.0)
    clock.now += 30.0
    windows.step(running, claims, lambda: measure)
    windows.step(running, claims, lambda: measure)  # the marker is still there: open again
    assert windows.is_open()
    clock.now += 1.0
    windows.step(running, claims, lambda: None)  # nothing was measured (its lock was held elsewhere)
    assert windows.state == CLOSED and windows.stats["gave_up"] == 1
    assert windows.not_before == pytest.approx(clock.now + gpu_windows.MIN_GAP_S)


def test_a_compile_is_quiet_only_where_a_compile_that_raises_ends_it_too(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton calls no hook after a compile that raises (an autotuner skips that config and runs the others), so
    record_compiles ends such a compile itself; where it cannot, a compile is not quiet."""
    triton_jit = pytest.importorskip("triton.runtime.jit")
    from opgate.verify.backends.triton_backend import record_compiles

    monkeypatch.setenv(gpu_pause.PAUSE_DIR_ENV, str(tmp_path))
    marker = gpu_pause.quiet_marker(tmp_path, os.getpid())
    gpu_pause.begin_task(True)
    try:
        gpu_pause.compiles_tracked(False)
        gpu_pause.compile_began()
        assert not marker.exists()  # a missed end would leave the task quiet while it runs kernels
        knobs = pytest.importorskip("triton").knobs
        saved = (knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook)
        try:
            record_compiles()
            knobs.runtime.jit_cache_hook(key="k", fn=None)
            assert marker.read_text() == gpu_pause.COMPILING
            with pytest.raises(AttributeError):  # the compile raises (here: no device caches on a bare object)
                triton_jit.JITFunction._do_compile(object(), "k", None, 0, {}, None, [], False)
            assert not marker.exists() and not gpu_pause._STATE["compiling"]
        finally:
            knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = saved
    finally:
        gpu_pause.end_task()


HANG_TIMER_CHILD = """
import os, sys, threading, time
from pathlib import Path
from opgate.engine import gpu_pause

root = Path(sys.argv[1])
gpu_pause.begin_task(True)
flag = gpu_pause.flag_path(root)
with gpu_pause.hang_timer(1.0):
    time.sleep(0.3)
    flag.write_text(str(os.getpid()))  # a window, asked by a runner that lives
    threading.Timer(1.5, flag.unlink).start()
    gpu_pause.pause_point()  # waits 1.5 s: past the timer, which must not count it
    time.sleep(0.5)
print("finished", round(gpu_pause.paused_seconds(), 1))
"""


def test_a_pause_inside_an_implementation_call_does_not_count_against_its_hang_timer(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": child_pythonpath(), gpu_pause.PAUSE_DIR_ENV: str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", HANG_TIMER_CHILD, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "finished" in proc.stdout, proc.stdout + proc.stderr[-2000:]


def test_a_flag_whose_runner_died_holds_no_task_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    monkeypatch.setenv(gpu_pause.PAUSE_DIR_ENV, str(tmp_path))
    gpu_pause.flag_path(tmp_path).write_text(dead.stdout.strip())
    gpu_pause.begin_task(True)
    try:
        began = time.perf_counter()
        gpu_pause.pause_point()
        assert time.perf_counter() - began < 1.0
    finally:
        gpu_pause.end_task()


def test_no_window_while_a_warm_up_of_an_idle_worker_runs() -> None:
    from opgate.engine.runner import _measurement_waiting

    measure = gpu_task("measure", "StampCheck", "timing", exclusive=True)
    pool = type("Pool", (), {"warming_up": lambda self: True})()
    assert _measurement_waiting([(0, measure)], [], 2, None, pool) is None
    pool = type("Pool", (), {"warming_up": lambda self: False})()
    assert _measurement_waiting([(0, measure)], [], 2, None, pool) is measure
    recovery = dataclasses.replace(measure, measures_in_windows=False)  # fills the card: never in a window
    assert _measurement_waiting([(0, recovery)], [], 2, None, pool) is None


def test_a_window_that_gives_up_leaves_the_wait_of_the_tasks_that_paused_out_of_their_time_limits(
        tmp_path: Path) -> None:
    windows, clock, claims, running, measure = windows_with(tmp_path)
    compiling = FakeSlot(gpu_task("other", "PausableWorkCheck", "side2", pausable=True), 1,
                         worker=type("W", (), {"proc": FakeProc(4343)})())
    busy = FakeSlot(gpu_task("busy", "PausableWorkCheck", "side3", pausable=True), 2,
                    worker=type("W", (), {"proc": FakeProc(4444)})())
    slots = [*running, compiling, busy]
    windows.step(slots, claims, lambda: measure)
    gpu_pause.quiet_marker(windows.folder, 4242).write_text(gpu_pause.PAUSED)  # waits at a pause point
    gpu_pause.quiet_marker(windows.folder, 4343).write_text(gpu_pause.COMPILING)  # compiles on meanwhile
    clock.now += windows.quiet_wait_s + 0.5  # the third never quiets down
    windows.step(slots, claims, lambda: measure)
    assert windows.state == CLOSED and windows.stats["gave_up"] == 1
    assert running[0].paused_s == pytest.approx(windows.quiet_wait_s + 0.5)
    assert compiling.paused_s == 0.0 and busy.paused_s == 0.0


def test_a_measurement_a_closing_window_withdrew_keeps_its_first_waits_start(tmp_path: Path) -> None:
    """withdraw_exclusive lets go of a waiting measurement's lock (its gate would keep the paused work out); asked
    again, its wait limit and its reported wait still count from when it first asked."""
    from test_gpu_guard import KEY as HELD_KEY, hold

    from opgate.engine.runner import _GpuClaims

    claims = _GpuClaims(GpuGuard(keys_for=lambda device: (HELD_KEY,), wait_s=60, directory=tmp_path))
    measure = gpu_task("measure", "StampCheck", "timing", exclusive=True)
    with hold(tmp_path, "shared", 2.0):
        assert claims.admit(7, measure) == (False, None)
        first = claims.waiting[7].since
        claims.withdraw_exclusive()
        assert 7 not in claims.waiting
        time.sleep(0.2)
        assert claims.admit(7, measure) == (False, None)
        assert claims.waiting[7].since == first and claims.waiting[7].blocked
    claims.release_all()


def test_a_check_that_starts_after_windows_leaves_them_out_of_its_operators_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A window pauses the run's side-by-side work; a numerics check that measures its operator's time since the
    calibration began (time_budget.budget_at_start) does not count the windows closed since then."""
    windows, clock, claims, running, measure = windows_with(tmp_path)
    windows.step(running, claims, lambda: measure)
    gpu_pause.quiet_marker(windows.folder, 4242).write_text(gpu_pause.PAUSED)
    windows.step(running, claims, lambda: measure)
    windows.started(measure)
    clock.now += 1.0
    windows.step(running, claims, lambda: None)
    [line] = gpu_pause.windows_log(windows.folder).read_text().splitlines()
    opened, closed = (float(v) for v in line.split())
    assert 0.0 <= closed - opened < 5.0  # epoch seconds (the fake clock drives only the state machine)
    gpu_pause.windows_log(windows.folder).write_text(f"{opened} {opened + 30.0}\n100 112\n")  # two windows
    monkeypatch.setenv(gpu_pause.PAUSE_DIR_ENV, str(windows.folder))
    assert gpu_pause.window_seconds_since(opened - 60.0) == pytest.approx(30.0)  # the one since then
    assert gpu_pause.window_seconds_since(opened + 10.0) == pytest.approx(20.0)  # its part since then
    assert gpu_pause.window_seconds_since(0.0) == pytest.approx(42.0)
    monkeypatch.delenv(gpu_pause.PAUSE_DIR_ENV)
    assert gpu_pause.window_seconds_since(0.0) == 0.0  # no windows outside a run with them


def test_a_check_paused_by_windows_reports_how_long_beside_its_wall_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """duration_s and phase_s stay wall time; extra["paused_in_windows_s"] says how much of it was waiting, and a
    check no window paused carries no such key."""
    from opgate.model.results import CheckResult, Outcome
    from opgate.verify.check import with_window_pause

    result = CheckResult(check_id="verify.op.impl.float32", title="t", outcome=Outcome.PASSED, reason="ok")
    monkeypatch.setenv(gpu_pause.PAUSE_DIR_ENV, str(tmp_path))
    gpu_pause.windows_log(tmp_path).write_text("1000 1012.5\n2000 2003\n")
    assert with_window_pause(result, 1500.0).extra["paused_in_windows_s"] == 3.0  # the window since it began
    assert "paused_in_windows_s" not in with_window_pause(result, 2500.0).extra


class KeyedClaims(FakeClaims):
    """FakeClaims with the runner's guard: the lock keys (GPU UUIDs) of a task's device."""

    def __init__(self) -> None:
        super().__init__()
        self.guard = GpuGuard(keys_for=lambda device: (f"GPU-{device}",), wait_s=60)


def test_a_window_gives_up_where_its_gpu_is_short_of_memory_once_the_work_is_quiet(tmp_path: Path) -> None:
    windows, clock, _, running, measure = windows_with(tmp_path)
    claims = KeyedClaims()
    measure = dataclasses.replace(measure, device=3)
    asked: list[tuple[str, ...]] = []
    shares = iter([0.3, 0.8])  # the paused tasks' live tensors fill 70% of the card, then (later) 20%
    windows.memory_share = lambda keys: (asked.append(tuple(keys)), next(shares))[1]
    windows.step(running, claims, lambda: measure)
    gpu_pause.quiet_marker(windows.folder, 4242).write_text(gpu_pause.PAUSED)
    clock.now += 1.0
    windows.step(running, claims, lambda: measure)
    assert windows.state == CLOSED and not windows.flag.exists() and claims.lent == set()
    assert windows.stats["short_of_memory"] == 1 and windows.stats["gave_up"] == 1 and asked == [("GPU-3",)]
    assert running[0].paused_s == pytest.approx(1.0)  # the wait at its pause point is not its time
    clock.now += gpu_windows.MIN_GAP_S
    windows.step(running, claims, lambda: measure)
    windows.step(running, claims, lambda: measure)
    assert windows.state == OPEN and claims.lent == {0}  # enough memory free now


def test_a_gpu_whose_free_memory_nvml_cannot_tell_holds_no_window_back(tmp_path: Path) -> None:
    windows, _, _, running, measure = windows_with(tmp_path)
    windows.memory_share = lambda keys: None
    claims = KeyedClaims()
    windows.step(running, claims, lambda: measure)
    gpu_pause.quiet_marker(windows.folder, 4242).write_text(gpu_pause.PAUSED)
    windows.step(running, claims, lambda: measure)
    assert windows.state == OPEN


class FakeNvmlError(Exception):
    pass


def fake_pynvml(free: dict[str, int], total: int) -> Any:
    """pynvml's calls free_memory_share makes (nvml_session: init, shutdown; a handle by UUID; its memory)."""
    import types

    def handle_by_uuid(uuid: bytes) -> str:
        if uuid.decode() not in free:
            raise FakeNvmlError("Not Found")
        return uuid.decode()

    module = types.SimpleNamespace(
        NVMLError=FakeNvmlError, NVMLError_LibraryNotFound=type("A", (FakeNvmlError,), {}),
        NVMLError_DriverNotLoaded=type("B", (FakeNvmlError,), {}), nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByUUID=handle_by_uuid,
        nvmlDeviceGetMemoryInfo=lambda handle: types.SimpleNamespace(free=free[handle], total=total))
    return module


def test_free_memory_share_is_the_smallest_among_the_keys_gpus_and_none_where_one_is_unknown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml({"GPU-a": 60, "GPU-b": 20}, total=80))
    assert gpu_windows.free_memory_share(["GPU-a"]) == pytest.approx(0.75)
    assert gpu_windows.free_memory_share(["GPU-a", "GPU-b"]) == pytest.approx(0.25)  # a MIG parent and child
    assert gpu_windows.free_memory_share(["GPU-a", "unidentified"]) is None


class FakeCuda:
    """The parts of torch.cuda a paused task's memory release uses, counting the releases."""

    def __init__(self, capturing: bool = False) -> None:
        self.capturing, self.emptied = capturing, 0

    def is_initialized(self) -> bool:
        return True

    def is_current_stream_capturing(self) -> bool:
        return self.capturing

    def synchronize(self) -> None:
        pass

    def empty_cache(self) -> None:
        self.emptied += 1


@pytest.mark.parametrize("capturing", [False, True])
def test_a_task_gives_its_cached_gpu_memory_back_when_it_quiets_for_a_window(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capturing: bool) -> None:
    import sys
    import threading
    import types

    cuda = FakeCuda(capturing)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setenv(gpu_pause.PAUSE_DIR_ENV, str(tmp_path))
    gpu_pause.begin_task(True)
    try:
        gpu_pause.compiles_tracked(True)
        gpu_pause.compile_began()  # no window asked: the cache stays
        gpu_pause.compile_ended()
        assert cuda.emptied == 0
        flag = gpu_pause.flag_path(tmp_path)
        flag.write_text(str(os.getpid()))  # a window, asked by a runner that lives
        gpu_pause.compile_began()
        threading.Timer(0.2, flag.unlink).start()
        gpu_pause.compile_ended()  # its pause point waits for the window, cache given back again
        # never while a CUDA graph is being captured: freeing would break the capture
        assert cuda.emptied == (0 if capturing else 2)
    finally:
        gpu_pause.end_task()
