"""Run each check in its own child process, so one check cannot take the run down.

A child is a fresh interpreter (`python -m opgate.engine.worker`): spawn semantics, never fork, so
no CUDA context, lock or thread state leaks in from the parent. A check that segfaults, hangs,
calls os._exit, raises, or poisons its CUDA context becomes an `error` result naming the signal,
timeout or exception; the next check starts in a clean process.

Tasks that share a `worker` key run in warm workers instead: one child serves many of them in turn, so the
imports (torch, Triton, CuPy), the CUDA context, the loaded spec and the compiled kernels are paid once. The
isolation stays: a worker that dies or hangs fails only the check it was running (its stderr since that check
started is the evidence); it is discarded and the next check of its key starts a fresh one. A worker whose
check left the CUDA context unusable exits by itself (engine/worker.py).

A task that uses a GPU starts only once it holds that GPU's host-wide lock (opgate.engine.gpu_guard): exclusive
tasks alone, the others shared, so two opgate runs on one host do not starve each other's GPU stages.

Children never outlive opgate: each is its own process group, killed as a group when the run is
interrupted (Ctrl-C, SIGTERM: `RunInterrupted` carries the results so far), and on Linux each asks the
kernel for SIGKILL when its parent dies (PR_SET_PDEATHSIG), so a SIGKILL of opgate kills them too.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Sequence

from opgate.checks.base import CheckContext
from opgate.engine.children import (die_with_parent, kill_process_group, kill_process_groups, package_root,
                                    reap_seconds_left, register_child, signal_name, signal_process_group,
                                    unregister_child)
from opgate.engine import gpu_memory, gpu_pause
from opgate.engine.gpu_memory import GpuMemory, read_gpu_memory
from opgate.engine.gpu_guard import EXCLUSIVE, GpuGuard, GpuLockRequest, Waiting
from opgate.engine.gpu_windows import MeasurementWindows
from opgate.engine.gpu_windows import enabled as windows_enabled
from opgate.engine.workdirs import owned_workdir
from opgate.engine.interrupts import RunInterrupted
from opgate.engine.worker import retires_after
from opgate.model.results import RETIRE_WORKER, CheckResult, Figure, Outcome, Threshold, slug

# How much of a dead child's stderr to keep as evidence.
STDERR_TAIL_CHARS = 2000
POLL_INTERVAL_S = 0.02


@dataclass(frozen=True)
class CheckTask:
    """One unit of work for the runner: which check class, with what context, for how long."""

    check_id: str
    title: str
    target: str  # "module:Class"
    timeout_s: float
    context: CheckContext = field(default_factory=CheckContext)
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment for this child only
    exclusive: bool = False  # measuring checks run alone, with no sibling competing for the GPU
    # Warm workers: tasks with the same non-empty `worker` key run one after another in a long-lived child
    # (`opgate.engine.worker --serve`) that keeps its imports, CUDA context and compiled kernels; "" is a fresh
    # process per task. `retire`: that worker exits after this task (e.g. after filling the GPU's memory);
    # `retire_unless_passed`: unless its check passed (a passed out-of-memory recovery check showed that its process
    # computes the same answer again; FlagGems' recovery checks took 3.2-3.8 s in a fresh worker, 0.8-0.9 s in a
    # used one on the H100, forty-first session).
    worker: str = ""
    retire: bool = False
    retire_unless_passed: bool = False
    # The GPU this task is pinned to (verify's per-GPU fan-out, CUDA_VISIBLE_DEVICES in `env`); None: any or all.
    # `exclusive` then means alone on that GPU: tasks pinned to other GPUs still run beside it.
    device: int | None = None
    # Where a task that arrives through a TaskFeed joins the queue: before every waiting task of a higher order.
    order: int = 0
    # It runs on its GPU (`device`, else the default one): it starts only once it holds that GPU's host-wide lock
    # (opgate.engine.gpu_guard), exclusively when `exclusive`, else shared, so other opgate runs on the host cannot
    # starve it.
    uses_gpu: bool = False
    # The share of the run's slots that tasks of this `target` may hold at once (1: no limit): work that nothing
    # else waits for must leave slots to the work that does.
    slot_share: float = 1.0
    # The share of the slots that tasks of this `target` may claim ahead of the queue's order while fewer of them
    # run (0: none): long work of a later order, which the work of an earlier order arriving all run long would
    # otherwise never reach (_next_position).
    slot_floor: float = 0.0
    # Check ids of tasks of the same run this one starts after: it waits while any of them is queued or running
    # (a sanitizer run's other implementations read the one run their first task made for all of them).
    after: tuple[str, ...] = ()
    # Check ids it starts after only while they run (a queued one holds nothing back): a numerics check waits for
    # its compile-ahead task to finish the compile it is in, instead of compiling the same kernel beside it (two
    # 85 s compiles of FlagGems' skip_layer_norm at once on the H100, fortieth session).
    after_running: tuple[str, ...] = ()
    # Its place in the queue is a priority, not an arrival: no later task of its order is taken before it for an idle
    # warm worker (_with_idle_worker). The compile-ahead tasks come queued plans-written-last first, and help only
    # until their plan is written; in three H100 library runs FlagGems' norms, first in that queue, had no idle worker
    # of their spec file's key, so every free slot went to a later task whose key had one (their tasks began at
    # 305-365 s, after their plans, while the others ran from 19 s; forty-seventh and forty-eighth sessions).
    ranked: bool = False
    # The seconds this check took in an earlier run (verify/check_seconds.py), None where not known: arriving, it
    # queues before the waiting tasks of its order expected to take less (_arrival_position), so the longest of a
    # backlog start first (a long one also comes `ranked`, to keep that place).
    expected_s: float | None = None
    # Before it starts, every idle warm worker and spare holding memory on its GPU ends, not only enough of them to
    # free the share a task of its kind wants (engine/gpu_memory.py): a measurement run again because it ran out of
    # memory beside them (verify/resume.follow_up). Half the H100 free was not enough for fla's cross-entropy at
    # M=8192, V=256000, while 48 idle workers' CUDA contexts held 27 GiB (fiftieth session).
    gpu_alone: bool = False
    # It waits at pause points while a measurement window is open (engine/gpu_windows.py, engine/gpu_pause.py): a
    # measurement may then run beside it. Only a warm worker's task pauses.
    pausable: bool = False
    # A measurement (exclusive) short and light enough to run in such a window (engine/gpu_windows.py): the runtime
    # stage's timing, not recovery (it fills the card beside the paused tasks' memory) nor ncu or qos (minutes long).
    measures_in_windows: bool = False
    # What the task judges, set where it is planned and copied onto its result (CheckResult.with_identity), so a
    # check never has to name it: verify's stage ("numerics", "sanitizer", ...), and labels (op, impl, dtype, tool).
    stage: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    # The unit the run completes one by one (verify: the spec file). An exclusive task of a group may start once no
    # side-by-side task of its group waits and its group's tasks have all arrived (TaskFeed.group_done): the
    # group's measurements then run while other groups' work goes on, instead of all at the end of the run.
    group: str = ""


# Host memory one warm verify worker holds (torch, Triton, CuPy imported, a CUDA context, the spec's tensors):
# about 1.5 GiB resident on the H200 host; the pool keeps at most as many idle ones as memory allows at 2 GiB each.
WARM_WORKER_BYTES = 2 * 2**30


# Warm workers alive per slot at most. A library's spec files each have their own key, and a new worker pays its
# imports and the spec's again (~14 CPU-s with fla on the H200 host): at 2 per slot, 80 of a library run's 112
# worker starts evicted an idle worker of another file that a later task of that file then had to start again
# (sixteenth H200 session, extra.engine.warm_workers).
WARM_WORKERS_PER_SLOT = 3


def warm_worker_limit(jobs: int) -> int:
    """How many warm workers may be alive at once: WARM_WORKERS_PER_SLOT x jobs (idle ones of other spec files
    wait), fewer when the host's available memory would not hold them, never fewer than jobs."""
    from opgate.probes.host_memory import available_memory_bytes

    available = available_memory_bytes()
    wanted = WARM_WORKERS_PER_SLOT * jobs
    by_memory = wanted if available is None else int(available // WARM_WORKER_BYTES)
    return max(1, jobs, min(wanted, by_memory))


def default_jobs() -> int:
    """Checks at once by default where each holds a warm worker (verify): one per CPU, 2 on a small machine (CI),
    up to 16. On the H200 host (16 CPUs) the eight compute-sanitizer runs of an operator and its numerics checks
    then all run side by side; with 12 slots a dtype's numerics waited for a sanitizer to end (seventh H200 session,
    in the history of docs/benchmarks.md)."""
    return max(2, min(16, os.cpu_count() or 2))


class TaskFeed:
    """Tasks that arrive while the run is already going, e.g. verify's numerics checks, each handed over as soon as
    the parent has calibrated its dtype while the GPU stages already run. Thread-safe: the producer calls `put`
    and finally `close()`, or `close(error)` to stop the run (the running children are killed and `error` is
    raised from run_checks). While the feed is open, an exclusive task of a higher order than `upcoming_order`
    (the lowest order still to come) waits: it is meant to run after the tasks still to come (e.g. recovery,
    which fills the GPU and retires its worker unless it passed, after the numerics)."""

    def __init__(self, upcoming_order: int, groups: Collection[str] = ()) -> None:
        self.upcoming_order = upcoming_order
        self._queue: "queue.SimpleQueue[CheckTask]" = queue.SimpleQueue()
        self._closed = threading.Event()
        self.error: BaseException | None = None
        self._arriving = set(groups)  # groups whose tasks may still arrive
        self._settled: list[str] = []
        self._lock = threading.Lock()
        self.started = time.perf_counter()  # the runner sets it when it starts
        # group -> seconds after the runner started when its last task finished (set by the runner): when a library
        # run had each spec file judged wholly
        self.completed: dict[str, float] = {}

    def group_done(self, group: str) -> None:
        """Every task of `group` has been put (the producer says so after its last `put` for it)."""
        with self._lock:
            self._arriving.discard(group)
            self._settled.append(group)  # its tasks may all have finished already: the runner looks (completed)

    def settled(self) -> list[str]:
        """The groups said done since the last call."""
        with self._lock:
            groups, self._settled = self._settled, []
        return groups

    def arriving(self, group: str) -> bool:
        """Whether more tasks of `group` may still arrive (none may once the feed is closed)."""
        with self._lock:
            if not self._queue.empty():  # put but not taken yet: it may be of this group
                return True
            return group in self._arriving and not self._closed.is_set()

    def put(self, tasks: Sequence[CheckTask]) -> None:
        for task in tasks:
            self._queue.put(task)

    def close(self, error: BaseException | None = None) -> None:
        self.error = error
        self._closed.set()

    @property
    def is_open(self) -> bool:
        return not self._closed.is_set() or not self._queue.empty()

    def take(self) -> list[CheckTask]:
        """Every task that arrived since the last call."""
        arrived: list[CheckTask] = []
        while True:
            try:
                arrived.append(self._queue.get_nowait())
            except queue.Empty:
                return arrived

    def holds(self, task: CheckTask) -> bool:
        return task.exclusive and task.order > self.upcoming_order and not self._closed.is_set()


ProgressHook = Callable[[CheckTask], None]
DoneHook = Callable[[CheckTask, CheckResult], None]
# Called with every child's result before it is final: returns the result to keep (possibly rewritten), or a
# task to run in its place (verify resumes an implementation after the case that crashed it, verify/resume.py).
FollowUpHook = Callable[[CheckTask, CheckResult], "CheckTask | CheckResult"]


def _child_env(task: CheckTask) -> dict[str, str]:
    env = dict(os.environ)
    # The child must import the same opgate as the parent, installed or from a source tree.
    root = package_root()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(task.env)
    return env


def pause_folder(workdir: Path) -> Path:
    """Where the warm workers of a pool in `workdir` look for a measurement window's flag (engine/gpu_pause.py)."""
    return workdir / "gpu-pause"


def _worker_env(task: CheckTask, workdir: Path) -> dict[str, str]:
    return {**_child_env(task), gpu_pause.PAUSE_DIR_ENV: str(pause_folder(workdir))}


def _tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-STDERR_TAIL_CHARS:]


CRASH_REMEDIATION = ("This is a crash or hang inside the check, not a verdict on your stack; re-run with --check "
                     "to isolate it and report it with the stderr tail in the JSON report.")


def _request_context(task: CheckTask) -> dict[str, Any]:
    """The check's CheckContext as its child reads it, with the task's timeout (the one place it is declared is
    where the task is planned: a verify stage, a doctor check's class)."""
    return {**asdict(task.context), "timeout_s": task.timeout_s}


def _child_error(task: CheckTask, reason: str, elapsed: float, stderr_tail: str, **extra: Any) -> CheckResult:
    """The `error` result of a child that died, hung or wrote nothing readable (one-shot or warm)."""
    return CheckResult(check_id=task.check_id, title=task.title, outcome=Outcome.ERROR, reason=reason,
                       duration_s=elapsed, remediation=CRASH_REMEDIATION, extra={"stderr_tail": stderr_tail, **extra})


def _read_child_result(task: CheckTask, path: Path, elapsed: float, error: Callable[..., CheckResult],
                       **extra: Any) -> CheckResult:
    """The result a child wrote, named as the task (the registered id users select, whatever the class calls
    itself), or an error when it cannot be read."""
    try:
        result = CheckResult.from_dict(json.loads(path.read_text()))
    except (ValueError, KeyError) as exc:
        return error(f"check wrote an unreadable result ({exc})")
    return dataclasses.replace(result, check_id=task.check_id, title=task.title,
                               duration_s=result.duration_s or elapsed,
                               extra={**result.extra, **extra} if extra else result.extra)


def _death(code: int | None, error: Callable[..., CheckResult]) -> CheckResult:
    if code is not None and code < 0:
        return error(f"check process died from {signal_name(code)}", returncode=code)
    return error(f"check process exited with code {code} before reporting a result", returncode=code)


class _Running:
    def __init__(self, task: CheckTask, workdir: Path, index: int) -> None:
        self.task = task
        self.index = index
        self.request_path = workdir / f"{index}.request.json"
        self.result_path = workdir / f"{index}.result.json"
        self.stderr_path = workdir / f"{index}.stderr"
        self.stdout_path = workdir / f"{index}.stdout"
        self.paused_s = 0.0  # a fresh process per task is never paused (only warm workers are: CheckTask.pausable)
        self.request_path.write_text(
            json.dumps({
                "check_id": task.check_id,
                "title": task.title,
                "target": task.target,
                "context": _request_context(task),
                "result_path": str(self.result_path),
            })
        )
        self.started = time.perf_counter()
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "opgate.engine.worker", str(self.request_path)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=_child_env(task),
                start_new_session=True,  # its own process group: a timeout kills grandchildren too
                preexec_fn=die_with_parent,
            )
        register_child(self.proc)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def kill(self) -> None:
        kill_process_group(self.proc)

    def finished(self) -> bool:
        return self.proc.poll() is not None

    def error(self, reason: str, **extra: Any) -> CheckResult:
        return _child_error(self.task, reason, self.elapsed(), _tail(self.stderr_path), **extra)

    def collect(self) -> CheckResult:
        """Turn a finished child into a result; called once the process has exited."""
        if self.result_path.is_file() and self.proc.returncode == 0:
            return _read_child_result(self.task, self.result_path, self.elapsed(), self.error)
        return _death(self.proc.returncode, self.error)  # a result written before the process died is not kept


class _WarmWorker:
    """One long-lived child serving the tasks of one `worker` key, one at a time."""

    def __init__(self, task: CheckTask, workdir: Path, serial: int) -> None:
        self.key = task.worker
        self.env = _worker_env(task, workdir)
        self.stderr_path = workdir / f"worker-{serial}.stderr"
        self.stdout_path = workdir / f"worker-{serial}.stdout"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "opgate.engine.worker", "--serve"],
                stdin=subprocess.PIPE, stdout=out, stderr=err, env=self.env,
                start_new_session=True, preexec_fn=die_with_parent,
            )
        register_child(self.proc)
        self.last_used = time.perf_counter()
        self.tasks_run = 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, request: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        self.tasks_run += 1

    def stderr_size(self) -> int:
        try:
            return self.stderr_path.stat().st_size
        except OSError:
            return 0

    def discard(self) -> None:
        """Dead, poisoned or timed out: kill it (and its group) and release its pipe, and drop the quiet marker a
        worker killed in a measurement window leaves (a new worker given its pid would read as quiet)."""
        kill_process_group(self.proc)
        pause_dir = self.env.get(gpu_pause.PAUSE_DIR_ENV)
        if pause_dir:
            with contextlib.suppress(OSError):
                gpu_pause.quiet_marker(Path(pause_dir), self.proc.pid).unlink()
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:  # a broken pipe to a dead worker
            pass

    def close(self) -> None:
        """End of the run: close its input so it exits; kill it if it does not."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.discard()


# Seconds make_gpu_room waits for the workers it ended to exit (their CUDA contexts torn down, the memory free)
# before the task it made room for starts; one still alive then is killed.
END_FOR_MEMORY_WAIT_S = 5.0


def _close_and_await(workers: Sequence[_WarmWorker], wait_s: float) -> None:
    """Every worker's input closed first, so they exit side by side, then each awaited, `wait_s` in all."""
    for worker in workers:
        with contextlib.suppress(OSError):
            if worker.proc.stdin is not None:
                worker.proc.stdin.close()
    deadline = time.perf_counter() + wait_s
    for worker in workers:
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.proc.wait(timeout=max(0.0, deadline - time.perf_counter()))


def _end_workers(workers: Sequence[_WarmWorker], wait_s: float) -> None:
    """End idle workers side by side (_close_and_await), then kill any still alive (discard)."""
    _close_and_await(workers, wait_s)
    for worker in workers:
        worker.discard()


class _WarmRunning:
    """A task running in a warm worker: the same interface as _Running."""

    def __init__(self, task: CheckTask, workdir: Path, index: int, worker: _WarmWorker) -> None:
        self.task, self.index, self.worker = task, index, worker
        self.task_number = worker.tasks_run + 1  # 1: this worker's first task (it paid the imports)
        self.result_path = workdir / f"{index}.{worker.tasks_run}.{id(worker)}.result.json"
        self.stderr_from = worker.stderr_size()
        self.started = time.perf_counter()
        self.paused_s = 0.0  # seconds it waited in measurement windows: not counted against its time limit
        self.proc = worker.proc
        worker.send({"check_id": task.check_id, "title": task.title, "target": task.target,
                     "context": _request_context(task), "result_path": str(self.result_path),
                     "retire": task.retire, "retire_unless_passed": task.retire_unless_passed,
                     "pausable": task.pausable})

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def finished(self) -> bool:
        return self.result_path.is_file() or not self.worker.alive()

    def kill(self) -> None:
        kill_process_group(self.worker.proc)

    def _stderr_tail(self) -> str:
        try:
            with open(self.worker.stderr_path, "rb") as handle:
                handle.seek(self.stderr_from)
                text = handle.read().decode(errors="replace")
        except OSError:
            return ""
        return text[-STDERR_TAIL_CHARS:]

    def error(self, reason: str, **extra: Any) -> CheckResult:
        return _child_error(self.task, reason, self.elapsed(), self._stderr_tail(), warm_worker=True, **extra)

    def collect(self) -> CheckResult:
        if self.result_path.is_file():
            return _read_child_result(self.task, self.result_path, self.elapsed(), self.error,
                                      worker={"pid": self.worker.proc.pid, "task_number": self.task_number})
        return _death(self.worker.proc.returncode, self.error)


class WarmPool:
    """Idle warm workers by key; at most `limit` alive at once (the least recently used idle one goes).
    `run_checks` makes its own, or takes one the caller made (and closes) to start workers early."""

    def __init__(self, workdir: Path, limit: int, guard: GpuGuard | None = None) -> None:
        self.workdir, self.limit = workdir, max(1, limit)
        # A warm-up that touches the GPU (a CUDA context, a compile) holds its GPU's lock shared until it has
        # finished: a context created while another opgate run's recovery stage fills the card would fail, and
        # leave the worker unusable for the checks that adopt it. (result file, its lock) per warm-up in flight.
        self.guard = guard or GpuGuard()
        self._warm_ups: list[tuple[Path, _WarmWorker, GpuLockRequest]] = []
        self.idle: list[_WarmWorker] = []
        self.busy: set[_WarmWorker] = set()
        # Spares: started before anyone knows which key they will serve (verify starts them before it has read
        # the spec); the first key whose environment matches adopts one instead of starting a worker.
        self.spares: list[_WarmWorker] = []
        # what the run's measurement windows did (engine/gpu_windows.py MeasurementWindows.report), set at its end
        self.measurement_windows: dict[str, float] = {}
        self.started = 0
        # why workers started and ended: each start pays its imports and the spec's (~14 CPU-s for a library like
        # fla on the H200 host), so a run's count of them is where worker churn shows (WarmPool.stats)
        self.events: collections.Counter[str] = collections.Counter()
        self.starts_by_key: collections.Counter[str] = collections.Counter()
        self._memory_read_at = -float("inf")  # when make_gpu_room last read NVML
        self.gpu_bytes_freed = 0  # what the idle workers it ended held on their GPU, as NVML said

    def _alive(self) -> int:
        return len(self.idle) + len(self.busy) + len(self.spares)

    def _adopt_spare(self, task: CheckTask) -> _WarmWorker | None:
        env = _worker_env(task, self.workdir)
        for worker in list(self.spares):
            if not worker.alive():
                self.spares.remove(worker)
                worker.discard()
            elif worker.env == env:
                self.spares.remove(worker)
                worker.key = task.worker
                return worker
        return None

    def start_spare(self, task: CheckTask) -> None:
        """Start a worker with `task`'s environment that runs `task` (a generic warm-up: imports, a CUDA context)
        and waits to be adopted by a key (prestart or take). Over the limit, or while another opgate run has the
        GPU to itself, nothing is started (a warm-up is only a head start)."""
        if self._alive() >= self.limit:
            return
        lock = self._warm_up_lock(task)
        if lock is False:
            return
        self.started += 1
        self.events["started as a spare"] += 1
        worker = _WarmWorker(dataclasses.replace(task, worker=""), self.workdir, self.started)
        self._send_warm_up(worker, task, lock)
        self.spares.append(worker)

    def _warm_up_lock(self, task: CheckTask) -> GpuLockRequest | None | bool:
        """The shared GPU lock a warm-up of `task` holds (None: it needs none); False when another run holds the
        GPU exclusively now (the warm-up is skipped, not waited for)."""
        if not task.uses_gpu:
            return None
        request = self.guard.request(task.device, False, task.check_id)
        if request.poll():
            return request
        request.release()
        return False

    def _send_warm_up(self, worker: _WarmWorker, task: CheckTask, lock: GpuLockRequest | None = None) -> None:
        result_path = self.workdir / f"warmup-{self.started}-{worker.tasks_run}.result.json"
        worker.send({"check_id": task.check_id, "title": task.title, "target": task.target,
                     "context": _request_context(task), "result_path": str(result_path)})
        if lock is not None:
            self._warm_ups.append((result_path, worker, lock))

    def warming_up(self) -> bool:
        """A warm-up of an idle worker holds the GPU (shared) and has not finished."""
        return any(not path.is_file() and worker.alive() for path, worker, _ in self._warm_ups)

    def settle(self, yield_all: bool = False) -> None:
        """Release the GPU locks of warm-ups that have finished (their result is written, or their worker died);
        `yield_all`: of every warm-up, before an exclusive task of this run (the guard keeps *other* runs out: this
        run's own measurements overlapped its warm-ups before the guard too, and must not wait for them)."""
        for entry in list(self._warm_ups):
            result_path, worker, lock = entry
            if yield_all or result_path.is_file() or not worker.alive():
                lock.release()
                self._warm_ups.remove(entry)

    def take(self, task: CheckTask) -> _WarmWorker:
        for worker in list(self.idle):
            if not worker.alive():  # exited after a retiring task or a poisoned context
                self.idle.remove(worker)
                worker.discard()
        # The one of the key that ran a check last: its kernels for this implementation are compiled and its inputs'
        # first-call costs paid (quantize's runtime checks took ~5 s each in fresh workers, 0.1-0.3 s in a used one).
        worker = self._idle_of_key(task)
        if worker is not None:
            self.idle.remove(worker)
            self.busy.add(worker)
            return worker
        spare = self._adopt_spare(task)
        if spare is not None:
            self.busy.add(spare)
            return spare
        while self.idle and self._alive() >= self.limit:
            oldest = min(self.idle, key=lambda w: w.last_used)
            self.idle.remove(oldest)
            oldest.close()
            self.events["ended idle to make room"] += 1
        self.started += 1
        self.events["started for a task (no idle worker of its key)"] += 1
        self.starts_by_key[task.worker] += 1
        worker = _WarmWorker(task, self.workdir, self.started)
        self.busy.add(worker)
        return worker

    def _idle_of_key(self, task: CheckTask) -> "_WarmWorker | None":
        """The idle worker `take` gives `task`: the one of its key that ran a check last (its kernels for this
        implementation are compiled and its inputs' first-call costs paid: quantize's runtime checks took ~5 s each
        in fresh workers, 0.1-0.3 s in a used one)."""
        mine = [worker for worker in self.idle if worker.key == task.worker]
        return max(mine, key=lambda w: (w.last_used, w.tasks_run)) if mine else None

    def make_gpu_room(self, task: CheckTask, keys: Sequence[str],
                      read: Callable[[Sequence[str]], GpuMemory | None] = read_gpu_memory) -> None:
        """Before `task` starts on its GPU (lock `keys`): while less of that GPU's memory is free than a task of its
        kind wants, end the idle warm workers and spares that hold the most of it (engine/gpu_memory.py), all but
        the one `take` would give `task`. `read`: NVML's reading (tests pass their own)."""
        now = time.perf_counter()
        if task.gpu_alone:  # the report counts them (its warm-worker events)
            self.events["measurements run again with their GPU emptied"] += 1
        if not task.exclusive and now - self._memory_read_at < gpu_memory.READ_EVERY_S:
            return
        self._memory_read_at = now
        keep = self._idle_of_key(task) if task.worker else None
        candidates = sorted((w for w in self.idle + self.spares if w is not keep and w.alive()),
                            key=lambda w: w.last_used)
        if not candidates:
            return
        memory = read(keys)
        if memory is None:
            return
        run_pids = [w.proc.pid for w in self.idle + list(self.busy) + self.spares]
        chosen = set(gpu_memory.holders_to_end(memory, [w.proc.pid for w in candidates], run_pids,
                                               gpu_memory.wanted_free_share(task.exclusive, task.gpu_alone)))
        ending = [w for w in candidates if w.proc.pid in chosen]
        for worker in ending:
            (self.idle if worker in self.idle else self.spares).remove(worker)
            self.events["ended idle to free GPU memory"] += 1
            self.gpu_bytes_freed += memory.used_by_pid.get(worker.proc.pid, 0)
        _end_workers(ending, wait_s=END_FOR_MEMORY_WAIT_S)

    def prestart(self, task: CheckTask) -> None:
        """Start a worker for `task`'s key now and have it run `task` (a warm-up: imports, the spec) while the
        caller does other work; it joins the idle workers at once, and the first real task of its key queues
        behind the warm-up in its input. Over the limit, or while another opgate run has the GPU to itself, nothing
        is started."""
        lock = self._warm_up_lock(task)
        if lock is False:
            return
        worker = self._adopt_spare(task)
        if worker is None:
            if self._alive() >= self.limit:
                if lock is not None:
                    lock.release()
                return
            self.started += 1
            self.events["prestarted"] += 1
            self.starts_by_key[task.worker] += 1
            worker = _WarmWorker(task, self.workdir, self.started)
        self._send_warm_up(worker, task, lock)
        self.idle.append(worker)

    def idle_keys(self) -> set[str]:
        """The keys with an idle warm worker alive now."""
        return {worker.key for worker in self.idle if worker.alive()}

    def give_back(self, worker: _WarmWorker, healthy: bool) -> None:
        self.busy.discard(worker)
        worker.last_used = time.perf_counter()
        if healthy and worker.alive():
            self.idle.append(worker)
        else:
            self.events["ended after its task (retired, died or poisoned)"] += 1
            worker.discard()

    def stats(self) -> dict[str, Any]:
        """How many workers started and ended, and why; the starts per key (the report's engine facts)."""
        return {"limit": self.limit, "started": self.started, "events": dict(self.events),
                "starts_by_key": dict(self.starts_by_key.most_common()),
                "gpu_gib_freed": round(self.gpu_bytes_freed / 2**30, 2)}

    def close(self, grace_s: float = 10.0) -> None:
        """End every worker: all inputs closed first, so they exit side by side, then each reaped (or killed
        after `grace_s` in all; 0 on an interrupt: a busy worker reads its input only when its task ends; the
        interrupted run's report is already written then, and a worker still dying 2 s after its SIGKILL is left to
        die)."""
        workers = self.idle + list(self.busy) + self.spares
        _close_and_await(workers, grace_s)
        kill_process_groups((worker.proc for worker in workers),  # those still running: all signalled, then reaped
                            wait_s=10.0 if grace_s else reap_seconds_left(2.0))
        for _, _, lock in self._warm_ups:
            lock.release()
        self._warm_ups.clear()
        self.idle.clear()
        self.busy.clear()
        self.spares.clear()


class _stop_on_interrupt:
    """Ctrl-C/SIGTERM inside run_checks: kill every running child's group, raise RunInterrupted with the
    results that had finished and the ids of the tasks that had not."""

    def __init__(self, running: list[Any], results: list[CheckResult | None],
                 pending: list[tuple[int, CheckTask]]) -> None:
        self.running, self.results, self.pending = running, results, pending

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        if kind is None or not issubclass(kind, KeyboardInterrupt) or isinstance(exc, RunInterrupted):
            return False
        # signalled, not reaped: the verb writes its report first; reaping waits for CUDA contexts' teardown, and
        # the pool's close and kill_all_children do it after (every child is registered)
        for slot in self.running:
            signal_process_group(slot.worker.proc if isinstance(slot, _WarmRunning) else slot.proc)
        not_run = [slot.task.check_id for slot in self.running] + [task.check_id for _, task in self.pending]
        raise RunInterrupted([r for r in self.results if r is not None], not_run) from None


def run_checks(
    tasks: Sequence[CheckTask],
    jobs: int = 1,
    on_start: ProgressHook | None = None,
    on_done: DoneHook | None = None,
    follow_up: FollowUpHook | None = None,
    pool: "WarmPool | None" = None,
    feed: TaskFeed | None = None,
    on_added: Callable[[int], None] | None = None,
    gpu_guard: GpuGuard | None = None,
) -> list[CheckResult]:
    """Run every task in a child process, at most `jobs` at once; results keep task order (tasks from `feed`
    after the given ones, in their order of arrival).

    Exclusive tasks wait until no task that runs side by side on their GPU is waiting, then for an empty slot
    table, and run alone. Tasks with a `worker` key share warm workers (at most warm_worker_limit(jobs) of them
    alive at once). `feed`: more tasks that arrive during the run (`on_added` is told how many each time); the run
    ends when the feed is closed and every task has finished. Tasks that use a GPU start once they hold its
    host-wide lock (`gpu_guard`, default: by the GPUs' UUIDs in /tmp/opgate-gpu-locks).
    """
    results: list[CheckResult | None] = [None] * len(tasks)
    if feed is not None:
        feed.started = time.perf_counter()
    pending = list(enumerate(tasks))
    running: list[Any] = []  # _Running | _WarmRunning
    claims = _GpuClaims(gpu_guard or (pool.guard if pool is not None else GpuGuard()))
    # its folder records its owner, and first sweeps the folders of runs that were SIGKILLed (engine/workdirs.py)
    with owned_workdir("opgate-run-") as workdir, _stop_on_interrupt(running, results, pending):
        own_pool = pool is None
        workers = WarmPool(workdir, warm_worker_limit(jobs), claims.guard) if pool is None else pool
        try:
            _schedule(pending, running, results, workdir, workers, jobs, on_start, on_done, follow_up, feed,
                      on_added, claims)
        finally:
            claims.release_all()
            if own_pool:
                workers.close()
    return [r for r in results if r is not None]


class _GpuClaims:
    """The GPU locks of one run's tasks: claims of tasks still waiting at the head of the queue, and of running ones
    (by their result index), released when the task ends or the run stops."""

    def __init__(self, guard: GpuGuard) -> None:
        self.guard = guard
        self.waiting: dict[int, Waiting] = {}
        self.held: dict[int, Waiting] = {}
        self.lent: dict[int, Waiting] = {}  # shared locks of paused tasks, given back for a measurement window
        # exclusive claims a closing window withdrew (withdraw_exclusive): asked again with their first wait's start,
        # so the wait limit and the reported wait count from when the task first asked
        self.withdrawn: dict[int, Waiting] = {}

    def lend(self, index: int) -> None:
        """A running task waits in a measurement window: its shared lock goes, so a measurement can take the GPU
        exclusively (engine/gpu_windows.py)."""
        claim = self.held.pop(index, None)
        if claim is not None:
            claim.request.release()
            self.lent[index] = claim

    def withdraw_exclusive(self) -> None:
        """Give up the locks exclusive tasks wait for (they ask again when they come to the head of the queue): a
        waiting exclusive request holds its GPU's gate, which would keep this run's own paused tasks from taking their
        shared locks again when a measurement window closes."""
        for index, claim in list(self.waiting.items()):
            if claim.request.mode == EXCLUSIVE:
                claim.request.release()
                self.withdrawn[index] = self.waiting.pop(index)

    def retake(self, index: int) -> bool:
        """The window closes: the paused task's shared lock again (False: not yet, another run's measurement has
        the GPU; the task waits on)."""
        claim = self.lent.get(index)
        if claim is None:
            return True
        # a released request asks again (its files are opened anew), past the gate as the holder it was: another
        # run's measurement waiting at the gate would otherwise hold this run's paused work up for its whole queue
        if not claim.request.poll(past_the_gate=True):
            return False
        self.held[index] = self.lent.pop(index)
        return True

    def admit(self, index: int, task: CheckTask) -> tuple[bool, CheckResult | None]:
        """(start it now, or the error result of a wait past the limit); (False, None): keep it waiting."""
        if not task.uses_gpu:
            return True, None
        claim = self.waiting.get(index)
        if claim is None:
            claim = self.waiting[index] = Waiting(self.guard.request(task.device, task.exclusive, task.check_id),
                                                  limit_s=self.guard.wait_s)
            earlier = self.withdrawn.pop(index, None)
            if earlier is not None:
                claim.since, claim.blocked = earlier.since, earlier.blocked
        if claim.request.poll():
            claim.granted_after_s = claim.waited_s()
            self.held[index] = self.waiting.pop(index)
            return True, None
        claim.blocked = True
        if claim.waited_s() <= self.guard.wait_s:
            return False, None
        del self.waiting[index]
        holder = claim.request.who_holds()
        claim.request.release()
        return False, gpu_wait_error(task, claim, holder)

    def finished(self, index: int, result: CheckResult) -> CheckResult:
        """Release the task's lock; a result of a task that had to wait says how long."""
        claim = self.held.pop(index, None) or self.lent.pop(index, None)
        if claim is None:
            return result
        claim.request.release()
        return with_gpu_wait(result, claim) if claim.blocked else result

    def release_all(self) -> None:
        for claim in [*self.waiting.values(), *self.held.values(), *self.lent.values()]:
            claim.request.release()
        self.waiting.clear()
        self.held.clear()
        self.lent.clear()


GPU_WAIT = "waited for the GPU (another opgate run held it)"


def gpu_wait_figure(check_id: str, stage: str, waited_s: float, limit_s: float) -> Figure:
    """How long a task waited for its GPU, keyed where it is made: VERB.STAGE.waited_for_the_gpu_another_opgate_run_
    held_it, the key reports carried while opgate.reporting.metrics derived it from a planned task's check id; the
    op, impl, dtype and tool are the result's labels (its task's, copied by the runner). A task planned without a
    stage (none of opgate's take the GPU guard) leaves the key to that derivation."""
    key = f"{check_id.split('.', 1)[0]}.{stage}.{slug(GPU_WAIT)}" if stage else ""
    return Figure(GPU_WAIT, waited_s, "s", Threshold(limit_s, "<=", "the GPU guard's limit (OPGATE_GPU_WAIT_S)"),
                  key=key)


def with_gpu_wait(result: CheckResult, claim: Waiting) -> CheckResult:
    """The result (its task's stage and labels on it) with the seconds its task waited for its GPU (held by another
    opgate run) before it started."""
    waited = round(claim.granted_after_s or 0.0, 2)
    figure = gpu_wait_figure(result.check_id, result.stage, waited, claim.limit_s)
    extra = {**result.extra, "gpu_guard": {"waited_s": waited, "mode": claim.request.mode,
                                          "gpus": list(claim.request.keys)}}
    return dataclasses.replace(result, figures=(*result.figures, figure), extra=extra)


def gpu_wait_error(task: CheckTask, claim: Waiting, holder: str) -> CheckResult:
    """The `error` of a task whose GPU stayed held past the guard's limit: not run, never a hang."""
    by = f" by {holder}" if holder else " by another opgate run"
    return CheckResult(
        task.check_id, task.title, Outcome.ERROR,
        f"not run: its GPU ({', '.join(claim.request.keys)}) stayed held{by} for {claim.waited_s():.0f} s, past the "
        f"GPU guard's limit of {claim.limit_s:g} s (lock files in {claim.request.directory})",
        figures=(gpu_wait_figure(task.check_id, task.stage, round(claim.waited_s(), 1), claim.limit_s),),
        remediation="Run the opgate verify runs of one GPU one after another or give each its own GPU "
                    "(CUDA_VISIBLE_DEVICES), or wait longer: OPGATE_GPU_WAIT_S=<seconds>.",
        extra={"gpu_guard": {"waited_s": round(claim.waited_s(), 1), "mode": claim.request.mode,
                             "gpus": list(claim.request.keys), "holder": holder}})


def _take_arrivals(feed: TaskFeed, pending: list[tuple[int, CheckTask]], results: list[CheckResult | None],
                   running: list[Any], on_added: Callable[[int], None] | None) -> None:
    """Queue the feed's new tasks by order; a feed closed with an error ends the run with that error."""
    if feed.error is not None:
        for slot in running:
            slot.kill()
        raise feed.error
    arrived = feed.take()
    for task in arrived:
        results.append(None)
        pending.insert(_arrival_position(pending, task), (len(results) - 1, task))
    if arrived and on_added is not None:
        on_added(len(arrived))


def _arrival_position(pending: Sequence[tuple[int, CheckTask]], task: CheckTask) -> int:
    """Where an arriving task joins the queue: before every waiting task of a higher order, and, where it has an
    expected length (CheckTask.expected_s), before the waiting tasks of its own order expected to take less or with
    none; else after them (first come, first served within an order)."""
    for at, (_, waiting) in enumerate(pending):
        if waiting.order > task.order:
            return at
        if (waiting.order == task.order and task.expected_s is not None
                and (waiting.expected_s is None or waiting.expected_s < task.expected_s)):
            return at
    return len(pending)


def _start(task: CheckTask, index: int, workdir: Path, pool: WarmPool) -> Any:
    if not task.worker:
        return _Running(task, workdir, index)
    worker = pool.take(task)
    try:
        return _WarmRunning(task, workdir, index, worker)
    except OSError:  # the worker died between tasks (its pipe is closed): one fresh try
        pool.give_back(worker, healthy=False)
        return _WarmRunning(task, workdir, index, pool.take(task))


def _shares_gpu(a: CheckTask, b: CheckTask) -> bool:
    return a.device is None or b.device is None or a.device == b.device


def _must_wait(task: CheckTask, running: Sequence[Any], paused: Collection[int] = ()) -> bool:
    """An exclusive task runs alone on its GPU, and nothing joins a GPU an exclusive task is measuring. `paused`:
    the result indices of tasks waiting in a measurement window (engine/gpu_windows.py), which a measurement may
    run beside."""
    return any(_shares_gpu(task, slot.task) and (task.exclusive or slot.task.exclusive) for slot in running
               if not paused or slot.index not in paused)


def _over_share(task: CheckTask, running: Sequence[Any], jobs: int) -> bool:
    """Tasks of `task`'s target already hold their share of the slots (CheckTask.slot_share)."""
    if task.slot_share >= 1.0:
        return False
    cap = max(1, int(task.slot_share * max(1, jobs)))
    return sum(1 for slot in running if slot.task.target == task.target) >= cap


def _next_position(pending: Sequence[tuple[int, CheckTask]], running: Sequence[Any] = (), jobs: int = 1,
                   idle_keys: Collection[str] = (), arriving: Callable[[str], bool] | None = None,
                   more_coming: bool = True, paused: Collection[int] = (),
                   startable: Callable[[CheckTask], bool] | None = None) -> int | None:
    """Where in the queue the next task to start is (None: none may start now): the first one that is not over its
    share of the slots, unless it is an exclusive (measuring) task and tasks that run side by side on its GPU still
    wait behind it; then the first of those. Measurements go after the side-by-side work instead of draining the
    slots before it: on a library the runtime stage's exclusive checks of every operator came before any numerics
    (tenth H200 session, in the history of docs/benchmarks.md). The exception is a group whose own work is done
    (CheckTask.group): no side-by-side task of it waits and `arriving` (TaskFeed.arriving; None: every task is
    queued already) says none will come. Its measurements start then if their GPU is free, so groups can complete
    one by one: on a library on the H200 host the side-by-side work never ran out before the run's end, and no
    measurement ever started (nineteenth H200 session). A measurement never waits at the head of the queue for
    running tasks to end (a drain): the side-by-side work behind it goes on, and it starts once its GPU is free, at
    the latest when that work is done (twenty-eighth session). Before all that, a task under its target's reserved
    slots (CheckTask.slot_floor) goes first: with the numerics of a library arriving all run long, the sanitizer
    runs queued behind them never started after the first eight (twenty-fourth H200 session). A task's share of the
    slots (CheckTask.slot_share) holds while other work may still come (`more_coming`: the feed is open) or may
    start; once neither, it takes the free slots too (fla_activations.py on the H200 host: its runtime warm-ups ran
    on in 8 of 16 slots for 65 s after its last numerics check). `idle_keys`: the keys with an idle warm worker
    (_with_idle_worker). `paused`: tasks waiting in a measurement window, which a measurement may run beside
    (_must_wait); `startable`: which tasks may start at all (a window holds the side-by-side GPU work back)."""
    side_by_side = {task.device for _, task in pending if not task.exclusive}
    groups_waiting = {task.group for _, task in pending if not task.exclusive}
    running_ids = {slot.task.check_id for slot in running}
    unfinished = {task.check_id for _, task in pending} | running_ids

    def group_done(group: str) -> bool:
        return bool(group) and group not in groups_waiting and not (arriving is not None and arriving(group))

    def may_start(task: CheckTask, shared: bool = True) -> bool:
        if startable is not None and not startable(task):
            return False
        if (shared and _over_share(task, running, jobs)) or unfinished.intersection(task.after):
            return False
        if running_ids.intersection(task.after_running):
            return False
        if task.exclusive and _must_wait(task, running, paused):
            return False  # a measurement starts on a free GPU; it never drains one (below)
        if not task.exclusive or not side_by_side or group_done(task.group):
            return True
        # pinned to a GPU with no side-by-side work waiting: it may start now
        return None not in side_by_side and task.device is not None and task.device not in side_by_side

    running_targets = collections.Counter(slot.task.target for slot in running)
    # A measurement waits for its GPU to be free and holds nothing back meanwhile. At the head of the queue it used to
    # stop every start behind it until the running tasks ended: with the runtime warm-ups topped up to their floor as
    # each ended the GPU never emptied, and 63 calibrated numerics checks waited from 375 s to the run's end at 545 s;
    # with the warm-ups held back too, the slots idled from 402 s to 477 s behind one numerics check (twenty-eighth
    # H200 session). On a free GPU it goes first, ahead of a reserved-slot task that would take the GPU again.
    draining = [task for _, task in pending if task.exclusive and may_start(task)]
    for at, (_, task) in enumerate(pending):
        if (task.slot_floor > 0.0 and running_targets[task.target] < max(1, int(task.slot_floor * max(1, jobs)))
                and may_start(task) and not any(_shares_gpu(task, measuring) for measuring in draining)):
            return at
    for at, (_, task) in enumerate(pending):
        if may_start(task):
            return _with_idle_worker(pending, at, idle_keys, may_start)
    if not more_coming:  # nothing else may start or come: a task over its share takes a free slot
        for at, (_, task) in enumerate(pending):
            if may_start(task, shared=False):
                return at
    return None  # only side-by-side work over its share, or measurements that wait for it


# How far down the queue a task of the same order may be taken instead of the head, for its idle warm worker.
IDLE_WORKER_LOOKAHEAD = 64


def _with_idle_worker(pending: Sequence[tuple[int, CheckTask]], at: int, idle_keys: Collection[str],
                      may_start: Callable[[CheckTask], bool]) -> int:
    """`at`, or a later task of the same order and kind whose key has an idle warm worker when `at`'s has none: a
    task whose key has no idle worker starts one (its imports and its spec's again) and, at the pool's limit, ends
    an idle worker of another key that a later task of that key then starts again. Tasks of one order are ready
    alike (a library's numerics checks, its runtime checks), so taking one of them first costs no other a place;
    a `ranked` head (CheckTask.ranked) keeps its place."""
    head = pending[at][1]
    if head.ranked or not head.worker or head.worker in idle_keys or not idle_keys:
        return at
    for later in range(at + 1, min(len(pending), at + 1 + IDLE_WORKER_LOOKAHEAD)):
        task = pending[later][1]
        if task.order != head.order or task.exclusive != head.exclusive:
            break
        if task.worker in idle_keys and may_start(task):
            return later
    return at


def _note_group_completed(feed: TaskFeed, group: str, pending: Sequence[tuple[int, CheckTask]],
                          running: Sequence[Any]) -> None:
    """Record when `group`'s last task finished (TaskFeed.completed), once none of it waits, runs or may arrive."""
    if (not group or group in feed.completed or feed.arriving(group) or any(t.group == group for _, t in pending)
            or any(slot.task.group == group for slot in running)):
        return
    feed.completed[group] = round(time.perf_counter() - feed.started, 1)


def _schedule(pending: list[tuple[int, CheckTask]], running: list[Any], results: list[CheckResult | None],
              workdir: Path, pool: WarmPool, jobs: int, on_start: ProgressHook | None,
              on_done: DoneHook | None, follow_up: FollowUpHook | None, feed: TaskFeed | None = None,
              on_added: Callable[[int], None] | None = None, claims: "_GpuClaims | None" = None) -> None:
    claims = claims or _GpuClaims(GpuGuard())
    windows = MeasurementWindows(pause_folder(pool.workdir)) if windows_enabled() else None
    try:
        _schedule_loop(pending, running, results, workdir, pool, jobs, on_start, on_done, follow_up, feed, on_added,
                       claims, windows)
    finally:
        if windows is not None:
            windows.close()
            pool.measurement_windows = windows.report()


def _in_window(task: CheckTask) -> bool:
    """A task that may start while a measurement window is asked for or open: a measurement made for one."""
    return task.uses_gpu and task.exclusive and task.measures_in_windows


def _measurement_waiting(pending: Sequence[tuple[int, CheckTask]], running: Sequence[Any], jobs: int,
                         feed: TaskFeed | None, pool: "WarmPool") -> CheckTask | None:
    """The measurement that would start now if the side-by-side GPU work were paused (None: none would, or a warm-up
    of an idle worker still runs: it could not pause)."""
    if pool.warming_up():
        return None
    beside = {slot.index for slot in running if slot.task.uses_gpu and not slot.task.exclusive}
    at = _next_position(pending, running, jobs, (), feed.arriving if feed is not None else None,
                        more_coming=feed is not None and feed.is_open, paused=beside, startable=_in_window)
    if at is None or (feed is not None and feed.holds(pending[at][1])):
        return None
    return pending[at][1]


def _schedule_loop(pending: list[tuple[int, CheckTask]], running: list[Any], results: list[CheckResult | None],
                   workdir: Path, pool: WarmPool, jobs: int, on_start: ProgressHook | None,
                   on_done: DoneHook | None, follow_up: FollowUpHook | None, feed: TaskFeed | None,
                   on_added: Callable[[int], None] | None, claims: "_GpuClaims",
                   windows: MeasurementWindows | None) -> None:
    while pending or running or (feed is not None and feed.is_open):
        pool.settle()  # warm-ups that finished give their GPU lock back
        if feed is not None:
            _take_arrivals(feed, pending, results, running, on_added)
            for group in feed.settled():
                _note_group_completed(feed, group, pending, running)
        paused: Collection[int] = ()
        startable: Callable[[CheckTask], bool] | None = None
        slots = max(1, jobs)
        if windows is not None:
            windows.step(running, claims, lambda: _measurement_waiting(pending, running, jobs, feed, pool))
            paused = windows.paused()
            if windows.holds_side_by_side():  # only the window's measurements start (engine/gpu_windows.py)
                startable = lambda task: windows.is_open() and _in_window(task)  # noqa: E731
            if windows.is_open() and not any(slot.task.exclusive for slot in running):
                slots += 1  # the paused tasks keep their slots: the measurement gets one more
        while pending and len(running) < slots:
            at = _next_position(pending, running, jobs, pool.idle_keys(),
                                feed.arriving if feed is not None else None,
                                more_coming=feed is not None and feed.is_open, paused=paused, startable=startable)
            if at is None:
                break
            index, task = pending[at]
            if _must_wait(task, running, paused) or (feed is not None and feed.holds(task)):
                break
            if task.uses_gpu and task.exclusive:
                pool.settle(yield_all=True)
            go, refused = claims.admit(index, task)  # its GPU's host-wide lock (another opgate run may hold it)
            if not go and refused is None:
                break  # it keeps its place at the head of the queue
            pending.pop(at)
            if refused is not None:
                refused = refused.with_identity(task.stage, task.labels)
                results[index] = refused
                if on_done:
                    on_done(task, refused)
                continue
            if on_start:
                on_start(task)
            if windows is not None:
                windows.started(task)
            if task.uses_gpu:  # idle workers holding its GPU's memory end first (engine/gpu_memory.py)
                pool.make_gpu_room(task, claims.guard.keys(task.device))
            try:
                running.append(_start(task, index, workdir, pool))
            except OSError as exc:
                result = claims.finished(index, CheckResult(task.check_id, task.title, Outcome.ERROR,
                                                            f"could not start the check process: {exc}")
                                         .with_identity(task.stage, task.labels))
                results[index] = result
                if on_done:
                    on_done(task, result)
        time.sleep(POLL_INTERVAL_S)
        for slot in list(running):
            if not slot.finished():
                paused_s = slot.paused_s + (windows.pausing_s(slot.index) if windows is not None else 0.0)
                if slot.elapsed() - paused_s <= slot.task.timeout_s:
                    continue
                slot.kill()
                result = slot.error(
                    f"check timed out after {slot.task.timeout_s:g} s and was killed",
                    timeout_s=slot.task.timeout_s,
                )
                healthy = False
            elif isinstance(slot, _WarmRunning):
                result = slot.collect()
                # a retiring task's worker exits by itself; one that poisoned its CUDA context has exited too
                retiring = retires_after(slot.task.retire, slot.task.retire_unless_passed, result.outcome)
                healthy = (slot.result_path.is_file() and not retiring and "cuda_fault" not in result.extra
                           and RETIRE_WORKER not in result.extra)
            else:
                unregister_child(slot.proc)
                result = slot.collect()
                healthy = True
            if isinstance(slot, _WarmRunning):
                pool.give_back(slot.worker, healthy)
            running.remove(slot)
            result = claims.finished(slot.index, result.with_identity(slot.task.stage, slot.task.labels))
            if follow_up is not None:
                after = follow_up(slot.task, result)
                if isinstance(after, CheckTask):
                    pending.insert(0, (slot.index, after))
                    continue
                result = after.with_identity(slot.task.stage, slot.task.labels)
            results[slot.index] = result
            if on_done:
                on_done(slot.task, result)
            if feed is not None:
                _note_group_completed(feed, slot.task.group, pending, running)
    if feed is not None and feed.error is not None:
        raise feed.error
