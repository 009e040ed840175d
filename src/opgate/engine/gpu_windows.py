"""Measurement windows: a run's timing and recovery checks measure while its side-by-side GPU tasks wait.

A measurement (an exclusive task: runtime timing, recovery) runs alone on its GPU. Without windows it starts only
once no other task of the run holds that GPU, which on a library means at the run's end: the numerics checks and
runtime warm-ups hold the GPU for minutes while they mostly run Triton's compiler on the CPU (last H200 library runs:
the measurements waited 160 s behind four compile-bound numerics checks). A window, asked for when a measurement
could start but for its busy GPU:

1. asking: the runner writes the flag (engine/gpu_pause.py) and starts no side-by-side GPU task; each running one
   that is pausable (CheckTask.pausable) marks itself quiet once it is inside a JIT compile or at a pause point.
   If they are not all quiet within QUIET_WAIT_S the flag goes and the run goes on as before.
2. open: every side-by-side task of the GPU is quiet; their shared GPU locks (engine/gpu_guard.py) are given back
   so the measurement can take the lock exclusively (another opgate run's tasks keep it out as before), and the
   measurements that may start run one after another in one slot more than the run's jobs.
3. reopening: after LONGEST_S, or once no measurement may start, the runner takes the shared locks again (past
   the lock's gate, as a holder would: another run's waiting measurement does not hold them up), removes the flag
   and the paused tasks go on; the seconds from the window's opening until the task's lock is back are added to its
   time limit (and left out of its case times by the task itself; each closed window goes into the pause folder's
   windows.log, which a numerics check starting later leaves out of its operator's budget). The next window waits at
   least as long as this one was open, so the side-by-side work keeps at least half of the GPU's time; a window in
   which no measurement started counts as one that gave up.

Only measurements of a stage short and light enough for a window take one (CheckTask.measures_in_windows: runtime
timing; not recovery, which fills the card beside the paused tasks' memory, nor ncu or qos, which run for minutes): a
window stays open while its measurement runs, which its own timeout bounds. While a window is asked for or open no
other task starts (work off the GPU would take the cores and the slot the measurement needs), and no window is asked
for while a warm-up of an idle worker still runs (it is no running task, so it could not pause).

A window also waits for the host to have MIN_IDLE_CORES idle (over the last second, /proc/stat): the tasks inside a
compile go on compiling during it, and a measurement's CUDA events time its launches too, so a measuring process that
has to wait for a core would time the wait (time_torch_events enqueues call by call).

A window opens only where its measurement's GPU has MIN_FREE_MEMORY_SHARE of its memory free once the paused tasks,
as they quiet, have given their allocators' cached memory back (engine/gpu_pause.py): their live tensors stay, and a
measurement that runs out of memory beside them is no fact about the GPU (verify/runtime.py reports it as an error).

A task that is not pausable (a sanitizer run, a task of another kind) keeps the GPU as before: no window opens while
one runs. One flag serves the run's every GPU: on a host of several, a window pauses the run's GPU work on all of
them (a window is seconds long). OPGATE_MEASUREMENT_WINDOWS=1 turns windows on (enabled()).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from opgate.engine import gpu_pause

ENV = "OPGATE_MEASUREMENT_WINDOWS"
# How long the side-by-side tasks have to reach a pause point or a compile once asked (a case's GPU part is well
# under a second on the H200 host; a longer one makes the window give up, not wait).
QUIET_WAIT_S = 2.0
# The longest a window stays open while measurements keep coming.
LONGEST_S = 20.0
# The shortest gap between two windows (and between a window that gave up and the next try) ...
MIN_GAP_S = 5.0
# ... doubled after each window that gave up, up to this: asking holds the side-by-side work back for up to
# QUIET_WAIT_S each time, which a run whose work never quiets down must not pay every few seconds.
MAX_GAP_S = 80.0

# The share of its GPU's memory that must be free, once every paused task has given its cached memory back
# (engine/gpu_pause.py), for a window to open: a measurement's need is not known before it runs, and on the H100
# probe run (thirty-fifth session) the paused tasks kept all 79 GiB and four runtime checks ran out of memory. Half
# the card is a margin, not a measured need; a window short of it gives up (and backs off) as one that did not quiet.
MIN_FREE_MEMORY_SHARE = 0.5

# Idle cores the host must have had over the last second for a window to be asked for (module docstring).
MIN_IDLE_CORES = 2.0
IDLE_SAMPLE_S = 1.0

CLOSED, ASKING, OPEN, REOPENING = "closed", "asking", "open", "reopening"


class IdleCores:
    """How many of the host's cores were idle over the last IDLE_SAMPLE_S or more (/proc/stat; None where it cannot
    be read: the guard then does not hold windows back)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter, stat: Path = Path("/proc/stat")) -> None:
        self.clock, self.stat = clock, stat
        self._last: tuple[float, float, float] | None = None  # (when, idle jiffies, total jiffies)
        self.idle: float | None = None

    def _read(self) -> tuple[float, float] | None:
        try:
            fields = self.stat.read_text().splitlines()[0].split()[1:]
            values = [float(v) for v in fields]
        except (OSError, IndexError, ValueError):
            return None
        idle = values[3] + (values[4] if len(values) > 4 else 0.0)  # idle + iowait
        return idle, sum(values[:8])

    def sample(self) -> float | None:
        now = self.clock()
        if self._last is not None and now - self._last[0] < IDLE_SAMPLE_S:
            return self.idle
        read = self._read()
        if read is None:
            return None
        if self._last is not None and read[1] > self._last[2]:
            share = (read[0] - self._last[1]) / (read[1] - self._last[2])
            self.idle = max(0.0, share) * (os.cpu_count() or 1)
        self._last = (now, *read)
        return self.idle


def free_memory_share(keys: Sequence[str]) -> float | None:
    """The smallest free share of memory among the GPUs (NVML UUIDs, MIG ones included) a task's lock keys name;
    None where NVML cannot tell (no driver, a key that is no UUID): the window is then not held back."""
    from opgate.engine.gpu_memory import read_gpu_memory

    memory = read_gpu_memory(keys)
    return memory.free_share() if memory is not None else None


def enabled() -> bool:
    """Windows are opt-in (OPGATE_MEASUREMENT_WINDOWS=1) until a GPU run has shown that the medians measured in them
    agree with those measured alone (scripts/gpu/windows_side_by_side.sh); none has yet."""
    return os.environ.get(ENV, "0").strip().lower() in ("1", "true", "yes", "on")


@dataclass
class MeasurementWindows:
    """The runner's window state (module docstring); `folder` is the run's pause folder, the one its warm workers
    find in OPGATE_GPU_PAUSE_DIR."""

    folder: Path
    quiet_wait_s: float = field(default_factory=lambda: QUIET_WAIT_S)
    longest_s: float = field(default_factory=lambda: LONGEST_S)
    min_gap_s: float = field(default_factory=lambda: MIN_GAP_S)
    clock: Callable[[], float] = time.perf_counter
    state: str = CLOSED
    since: float = 0.0
    not_before: float = 0.0
    give_up_gap_s: float = 0.0  # the gap after the next give-up (doubles each time; a window that opens resets it)
    cores: IdleCores | None = None  # None: one reading /proc/stat
    # the free share of the memory of the GPUs named by these lock keys (free_memory_share; tests pass their own)
    memory_share: Callable[[Sequence[str]], float | None] = field(default=free_memory_share)
    min_free_share: float = field(default_factory=lambda: MIN_FREE_MEMORY_SHARE)
    lent: dict[int, Any] = field(default_factory=dict)  # result index -> running slot whose shared lock was lent
    opened_at: float = 0.0
    opened_epoch: float = 0.0
    held_s: float = 0.0  # how long the last window was open
    measured_at_open: float = 0.0
    stats: dict[str, float] = field(default_factory=lambda: {"asked": 0, "opened": 0, "gave_up": 0, "measured": 0,
                                                             "short_of_memory": 0, "seconds_open": 0.0})

    def __post_init__(self) -> None:
        (self.folder / gpu_pause.QUIET).mkdir(parents=True, exist_ok=True)
        if self.cores is None:
            self.cores = IdleCores(self.clock)

    @property
    def flag(self) -> Path:
        return gpu_pause.flag_path(self.folder)

    def is_open(self) -> bool:
        return self.state == OPEN

    def holds_side_by_side(self) -> bool:
        """No side-by-side GPU task may start now."""
        return self.state != CLOSED

    def paused(self) -> set[int]:
        """The result indices of the tasks a measurement may run beside (they wait at a pause point or compile)."""
        return set(self.lent) if self.state == OPEN else set()

    def pausing_s(self, index: int) -> float:
        """Seconds the task of result `index` has waited in the window now open or reopening (not yet added to its
        slot's paused_s): its time limit does not count them."""
        return self.clock() - self.opened_at if index in self.lent and self.state in (OPEN, REOPENING) else 0.0

    def _marker(self, slot: Any) -> Path | None:
        proc = getattr(getattr(slot, "worker", None), "proc", None)
        return gpu_pause.quiet_marker(self.folder, proc.pid) if proc is not None else None

    def quiet(self, slot: Any) -> bool:
        marker = self._marker(slot)
        return marker is not None and marker.exists()

    def waiting_at_pause_point(self, slot: Any) -> bool:
        """Quiet because it waits (not because it compiles, which goes on)."""
        marker = self._marker(slot)
        try:
            return marker is not None and marker.read_text() == gpu_pause.PAUSED
        except OSError:
            return False

    def step(self, running: Sequence[Any], claims: Any, wanted: Callable[[], Any]) -> None:
        """Advance the window by what the running tasks and the queue say now. `wanted()`: the exclusive task that
        would start if its GPU were free (None: none), asked only while it matters."""
        now = self.clock()
        idle = self.cores.sample() if self.cores is not None else None  # kept fresh: over the last second or so
        if self.state == CLOSED:
            if now < self.not_before:
                return
            on_gpu = [slot for slot in running if slot.task.uses_gpu]
            if not on_gpu or not all(_pausable(slot) for slot in on_gpu):
                return  # a free GPU needs no window; a task that cannot pause keeps it
            if (idle is None or idle >= MIN_IDLE_CORES) and wanted() is not None:
                self._write_flag()
                self.state, self.since = ASKING, now
                self.stats["asked"] += 1
        elif self.state == ASKING:
            on_gpu = [slot for slot in running if slot.task.uses_gpu]
            if all(_pausable(slot) and self.quiet(slot) for slot in on_gpu):
                if self._short_of_memory(claims, wanted()):
                    self.stats["short_of_memory"] += 1
                    self._pauses_end(on_gpu, now)
                    self._close(now, gave_up=True)
                    return
                for slot in on_gpu:
                    claims.lend(slot.index)
                    self.lent[slot.index] = slot
                self.state, self.since, self.opened_at, self.opened_epoch = OPEN, now, now, time.time()
                self.measured_at_open = self.stats["measured"]
                self.stats["opened"] += 1
            elif now - self.since > self.quiet_wait_s:
                self._pauses_end(on_gpu, now)
                self._close(now, gave_up=True)
        elif self.state == OPEN:
            measuring = any(slot.task.exclusive for slot in running)
            if not measuring and (now - self.since > self.longest_s or wanted() is None):
                self.held_s = now - self.since
                self.stats["seconds_open"] = round(self.stats["seconds_open"] + self.held_s, 2)
                # a measurement still waiting for the lock (another process's terms hold it shared) holds the lock's
                # gate: the paused tasks could never take theirs again
                claims.withdraw_exclusive()
                self.state, self.since = REOPENING, now
        if self.state == REOPENING:
            alive = {slot.index for slot in running}
            for index, slot in list(self.lent.items()):
                if index not in alive or claims.retake(index):
                    # its time limit does not count the window, from the opening until its lock is back
                    slot.paused_s = getattr(slot, "paused_s", 0.0) + now - self.opened_at
                    del self.lent[index]
            if not self.lent:
                with contextlib.suppress(OSError):  # the checks that start later leave it out of their budgets
                    with gpu_pause.windows_log(self.folder).open("a") as log:
                        log.write(f"{self.opened_epoch:.3f} {time.time():.3f}\n")
                if self.stats["measured"] > self.measured_at_open:
                    self.give_up_gap_s = 0.0
                    self._close(now, gap=max(self.min_gap_s, self.held_s))
                else:  # nothing measured (its lock was held elsewhere): backs off as a window that gave up
                    self._close(now, gave_up=True)

    def _pauses_end(self, on_gpu: Sequence[Any], now: float) -> None:
        """A window that will not open: the tasks that waited for it at a pause point do not count the wait against
        their time limits."""
        for slot in on_gpu:
            if self.waiting_at_pause_point(slot):
                slot.paused_s = getattr(slot, "paused_s", 0.0) + now - self.since

    def _short_of_memory(self, claims: Any, task: Any) -> bool:
        """Whether the measurement's GPU has less than min_free_share of its memory free now that the paused tasks
        gave their cached memory back (MIN_FREE_MEMORY_SHARE). A measurement no longer waiting: not short."""
        if task is None:
            return False
        guard = getattr(claims, "guard", None)
        keys = guard.keys(task.device) if guard is not None else ()
        share = self.memory_share(keys) if keys else None
        return share is not None and share < self.min_free_share

    def started(self, task: Any) -> None:
        if self.state == OPEN and task.exclusive:
            self.stats["measured"] += 1

    def _write_flag(self) -> None:
        self.flag.write_text(str(os.getpid()))

    def _close(self, now: float, gave_up: bool = False, gap: float | None = None) -> None:
        with contextlib.suppress(OSError):
            self.flag.unlink()
        if gave_up:
            self.stats["gave_up"] += 1
            self.give_up_gap_s = min(MAX_GAP_S, max(self.min_gap_s, 2 * self.give_up_gap_s))
            gap = self.give_up_gap_s
        self.state = CLOSED
        self.not_before = now + (self.min_gap_s if gap is None else gap)

    def close(self) -> None:
        """The run ends (or stops): no task may wait for a window any more."""
        with contextlib.suppress(OSError):
            self.flag.unlink()
        self.state = CLOSED
        self.lent.clear()

    def report(self) -> dict[str, float]:
        return dict(self.stats)


def _pausable(slot: Any) -> bool:
    return bool(getattr(slot.task, "pausable", False)) and getattr(slot, "worker", None) is not None

