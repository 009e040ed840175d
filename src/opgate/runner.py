"""Run each check in its own child process, so one check cannot take the run down.

A child is a fresh interpreter (`python -m opgate.checks.worker`): spawn semantics, never fork, so
no CUDA context, lock or thread state leaks in from the parent. A check that segfaults, hangs,
calls os._exit, raises, or poisons its CUDA context becomes an `error` result naming the signal,
timeout or exception; the next check starts in a clean process.

Children never outlive opgate: each is its own process group, killed as a group when the run is
interrupted (Ctrl-C, SIGTERM: `RunInterrupted` carries the results so far), and on Linux each asks the
kernel for SIGKILL when its parent dies (PR_SET_PDEATHSIG), so a SIGKILL of opgate kills them too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from opgate.checks.base import CheckContext
from opgate.results import CheckResult, Outcome

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


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a run: every child is killed; `results` are the checks that finished."""

    def __init__(self, results: Sequence[CheckResult], not_run: Sequence[str]) -> None:
        super().__init__("interrupted")
        self.results = list(results)
        self.not_run = list(not_run)


# prctl(2) option: the signal the kernel sends this process when its parent thread exits.
PR_SET_PDEATHSIG = 1
_LIVE_CHILDREN: set[subprocess.Popen[Any]] = set()


def die_with_parent() -> None:
    """preexec_fn of every child: SIGKILL it when opgate dies (Linux); elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


def register_child(proc: subprocess.Popen[Any]) -> None:
    _LIVE_CHILDREN.add(proc)


def unregister_child(proc: subprocess.Popen[Any]) -> None:
    _LIVE_CHILDREN.discard(proc)


def kill_process_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL a child's whole process group (its grandchildren too) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    unregister_child(proc)


def kill_all_children() -> None:
    """Kill every child opgate started that is still registered (the interrupt path)."""
    for proc in list(_LIVE_CHILDREN):
        kill_process_group(proc)


ProgressHook = Callable[[CheckTask], None]
DoneHook = Callable[[CheckTask, CheckResult], None]
# Called with every child's result before it is final: returns the result to keep (possibly rewritten), or a
# task to run in its place (verify resumes an implementation after the case that crashed it, verify/resume.py).
FollowUpHook = Callable[[CheckTask, CheckResult], "CheckTask | CheckResult"]


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[1])


def _child_env(task: CheckTask) -> dict[str, str]:
    env = dict(os.environ)
    # The child must import the same opgate as the parent, installed or from a source tree.
    root = _package_root()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(task.env)
    return env


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-STDERR_TAIL_CHARS:]


class _Running:
    def __init__(self, task: CheckTask, workdir: Path, index: int) -> None:
        self.task = task
        self.index = index
        self.request_path = workdir / f"{index}.request.json"
        self.result_path = workdir / f"{index}.result.json"
        self.stderr_path = workdir / f"{index}.stderr"
        self.stdout_path = workdir / f"{index}.stdout"
        self.request_path.write_text(
            json.dumps({
                "check_id": task.check_id,
                "title": task.title,
                "target": task.target,
                "context": asdict(task.context),
                "result_path": str(self.result_path),
            })
        )
        self.started = time.perf_counter()
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "opgate.checks.worker", str(self.request_path)],
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

    def error(self, reason: str, **extra: Any) -> CheckResult:
        return CheckResult(
            check_id=self.task.check_id,
            title=self.task.title,
            outcome=Outcome.ERROR,
            reason=reason,
            duration_s=self.elapsed(),
            remediation="This is a crash or hang inside the check, not a verdict on your stack; "
            "re-run with --check to isolate it and report it with the stderr tail in the JSON report.",
            extra={"stderr_tail": _tail(self.stderr_path), **extra},
        )

    def collect(self) -> CheckResult:
        """Turn a finished child into a result; called once the process has exited."""
        code = self.proc.returncode
        if self.result_path.is_file():
            try:
                result = CheckResult.from_dict(json.loads(self.result_path.read_text()))
            except (ValueError, KeyError) as exc:
                return self.error(f"check wrote an unreadable result ({exc})")
            if code == 0:
                # The registered name is the id users select and see, whatever the class calls itself.
                return dataclasses.replace(result, check_id=self.task.check_id,
                                           duration_s=result.duration_s or self.elapsed())
        if code is not None and code < 0:
            return self.error(f"check process died from {_signal_name(code)}", returncode=code)
        return self.error(f"check process exited with code {code} before reporting a result", returncode=code)


class _stop_on_interrupt:
    """Ctrl-C/SIGTERM inside run_checks: kill every running child's group, raise RunInterrupted with the
    results that had finished and the ids of the tasks that had not."""

    def __init__(self, running: list[_Running], results: list[CheckResult | None],
                 pending: list[tuple[int, CheckTask]]) -> None:
        self.running, self.results, self.pending = running, results, pending

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        if kind is None or not issubclass(kind, KeyboardInterrupt) or isinstance(exc, RunInterrupted):
            return False
        for slot in self.running:
            slot.kill()
        not_run = [slot.task.check_id for slot in self.running] + [task.check_id for _, task in self.pending]
        raise RunInterrupted([r for r in self.results if r is not None], not_run) from None


def run_checks(
    tasks: Sequence[CheckTask],
    jobs: int = 1,
    on_start: ProgressHook | None = None,
    on_done: DoneHook | None = None,
    follow_up: FollowUpHook | None = None,
) -> list[CheckResult]:
    """Run every task in its own child process, at most `jobs` at once; results keep task order.

    Exclusive tasks wait for an empty slot table and run alone.
    """
    results: list[CheckResult | None] = [None] * len(tasks)
    pending = list(enumerate(tasks))
    running: list[_Running] = []
    with tempfile.TemporaryDirectory(prefix="opgate-run-") as tmp, _stop_on_interrupt(running, results, pending):
        workdir = Path(tmp)
        while pending or running:
            while pending and len(running) < max(1, jobs):
                index, task = pending[0]
                if task.exclusive and running:
                    break
                if running and running[0].task.exclusive:
                    break
                pending.pop(0)
                if on_start:
                    on_start(task)
                try:
                    running.append(_Running(task, workdir, index))
                except OSError as exc:
                    result = CheckResult(task.check_id, task.title, Outcome.ERROR,
                                         f"could not start the check process: {exc}")
                    results[index] = result
                    if on_done:
                        on_done(task, result)
            time.sleep(POLL_INTERVAL_S)
            for slot in list(running):
                if slot.proc.poll() is None:
                    if slot.elapsed() <= slot.task.timeout_s:
                        continue
                    slot.kill()
                    result = slot.error(
                        f"check timed out after {slot.task.timeout_s:g} s and was killed",
                        timeout_s=slot.task.timeout_s,
                    )
                else:
                    unregister_child(slot.proc)
                    result = slot.collect()
                running.remove(slot)
                if follow_up is not None:
                    after = follow_up(slot.task, result)
                    if isinstance(after, CheckTask):
                        pending.insert(0, (slot.index, after))
                        continue
                    result = after
                results[slot.index] = result
                if on_done:
                    on_done(slot.task, result)
    return [r for r in results if r is not None]
