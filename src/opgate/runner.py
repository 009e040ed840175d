"""Run each check in its own child process, so one check cannot take the run down.

A child is a fresh interpreter (`python -m opgate.checks.worker`): spawn semantics, never fork, so
no CUDA context, lock or thread state leaks in from the parent. A check that segfaults, hangs,
calls os._exit, raises, or poisons its CUDA context becomes an `error` result naming the signal,
timeout or exception; the next check starts in a clean process.
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
            )

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

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
    with tempfile.TemporaryDirectory(prefix="opgate-run-") as tmp:
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
