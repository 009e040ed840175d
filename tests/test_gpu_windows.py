"""Measurement windows (engine/gpu_windows.py, engine/gpu_pause.py): a measurement runs while the run's side-by-side
GPU work waits at a pause point or compiles, with real warm workers and the GPU guard's real locks on a fake GPU key;
the window's state machine on its own with a fake clock."""

from __future__ import annotations

import dataclasses
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
                     pausable=pausable)


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
