"""Sticky-error recovery trials for GPU sessions (scripts/gpu_check.sh), driven by a supervisor over worker
processes (gpu_recovery_worker.py beside it). Not part of the `opgate` CLI: out-of-memory recovery is
`opgate verify --stages recovery` (opgate.gpu.probes.oom), and `opgate verify` replaces a worker after a
sticky error itself (opgate.engine.worker); these trials measure how long that replacement takes.

* Sticky error: a planted kernel stores to an unmapped address (error 700). The supervisor detects it
  (the worker reports the sticky error and exits, or dies, or stops answering), starts a new worker and
  goes on; the new worker must compute the right answer. Time to recover = from detection to that answer.

    PYTHONPATH=src python3 tests/data/gpu/gpu_recovery.py [--trials 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

import opgate  # noqa: E402
from opgate.engine.atomic import write_atomically  # noqa: E402

WORKER_SCRIPT = str(Path(__file__).resolve().with_name("gpu_recovery_worker.py"))


class WorkerGone(Exception):
    """The worker died or stopped answering; the message says which."""


class WorkerProcess:
    """One worker child, spoken to in JSON lines. Its stderr goes to a file kept for the report."""

    def __init__(self, command: Sequence[str] | None = None, start_timeout_s: float = 120.0,
                 env: dict[str, str] | None = None) -> None:
        self.command = list(command or [sys.executable, WORKER_SCRIPT])
        child_env = dict(os.environ if env is None else env)
        package_root = str(Path(opgate.__file__).resolve().parents[1])
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, child_env.get("PYTHONPATH", "")) if p)
        child_env.setdefault("PYTHONUNBUFFERED", "1")
        self._stderr = tempfile.TemporaryFile()
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, env=child_env, text=True, bufsize=1,
                                     start_new_session=True)
        self._closed = False
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            hello = self._next(start_timeout_s, "starting")
        except WorkerGone:
            self.close()
            raise
        if not hello.get("ok"):
            self.close()
            raise WorkerGone(f"worker could not start: {hello.get('error', hello)}")
        self.pid = int(hello.get("pid", self.proc.pid))
        self.device = hello.get("device", "")
        self.ready_s = time.perf_counter() - self.started

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)  # EOF: the worker is gone

    def _next(self, timeout_s: float, doing: str) -> dict[str, Any]:
        deadline = time.perf_counter() + timeout_s
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise WorkerGone(f"worker did not answer within {timeout_s:g} s while {doing}")
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                code = self.proc.wait(timeout=10)
                raise WorkerGone(f"worker exited (code {code}) while {doing}: {self.stderr_tail()}")
            try:
                message = json.loads(line)
            except ValueError:
                continue  # a stray print from a library: not a response
            if isinstance(message, dict):
                return message

    def request(self, message: dict[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
        if self.proc.poll() is not None:
            raise WorkerGone(f"worker already exited (code {self.proc.returncode})")
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerGone(f"worker's stdin is closed ({exc})") from None
        return self._next(timeout_s, f"handling {message.get('op')}")

    def stderr_tail(self, chars: int = 1500) -> str:
        if self._closed:
            return ""
        try:
            self._stderr.seek(0)
            return self._stderr.read().decode(errors="replace")[-chars:].strip()
        except (OSError, ValueError):
            return ""

    def exit_code(self, wait_s: float = 10.0) -> int | None:
        try:
            return self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def close(self, graceful: bool = True) -> None:
        """Ask the worker to exit (kill it if it will not; at once when not graceful), then release its
        pipes. Idempotent."""
        if self._closed:
            return
        if graceful and self.proc.poll() is None:
            try:
                self.request({"op": "exit"}, timeout_s=10)
            except WorkerGone:
                pass
        self.kill()
        self._reader.join(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        self._stderr.close()
        self._closed = True


@dataclass(frozen=True)
class StickyTrial:
    index: int
    faulted: bool
    cuda_error: int | None
    cuda_error_name: str | None
    detected_by: str  # "worker reported a sticky error", "worker died", "worker stopped answering", "not detected"
    old_worker_exit: int | None
    recovered: bool
    detect_s: float  # from sending the fault to knowing the worker is unusable
    recover_s: float  # from detection to the new worker's verified answer
    new_worker_ready_s: float
    rel_error_after: float | None
    note: str = ""


@dataclass(frozen=True)
class RecoveryReport:
    status: str  # passed / failed / skipped
    reason: str
    sticky: tuple[StickyTrial, ...] = ()
    explanation: str = ""
    duration_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def _rate(items: Sequence[Any]) -> float | None:
        return sum(1 for t in items if t.recovered) / len(items) if items else None

    @staticmethod
    def _mean(values: Sequence[float]) -> float | None:
        return statistics.fmean(values) if values else None

    def summary(self) -> dict[str, Any]:
        return {
            "sticky_trials": len(self.sticky),
            "sticky_success_rate": self._rate(self.sticky),
            "sticky_mean_recover_s": self._mean([t.recover_s for t in self.sticky if t.recovered]),
            "sticky_max_recover_s": max((t.recover_s for t in self.sticky if t.recovered), default=None),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "summary": self.summary(),
                "sticky": [t.__dict__ for t in self.sticky],
                "explanation": self.explanation, "duration_s": round(self.duration_s, 2), **self.extra}


def run_sticky_trials(trials: int, worker_command: Sequence[str] | None = None,
                      fault_timeout_s: float = 60.0) -> list[StickyTrial]:
    """Poison a worker `trials` times; after each, replace it and check the new one computes correctly."""
    worker = WorkerProcess(worker_command)
    results: list[StickyTrial] = []
    try:
        baseline = worker.request({"op": "compute", "seed": 0})
        if not baseline.get("correct"):
            raise WorkerGone(f"a fresh worker computed a wrong result before any fault: {baseline}")
        for index in range(trials):
            sent = time.perf_counter()
            note = ""
            response: dict[str, Any] = {}
            try:
                response = worker.request({"op": "poison"}, timeout_s=fault_timeout_s)
                if response.get("sticky"):
                    detected_by = "worker reported a sticky error"
                elif not response.get("faulted"):
                    detected_by = "not detected"
                    note = response.get("note", "the planted fault did not happen")
                else:
                    detected_by = "not detected"
                    note = "the worker faulted but its context still worked (not sticky)"
            except WorkerGone as exc:
                detected_by = "worker stopped answering" if "did not answer" in str(exc) else "worker died"
                note = str(exc)[:300]
            detected = time.perf_counter()
            old_exit = worker.exit_code(wait_s=10.0 if detected_by != "worker stopped answering" else 0.5)
            worker.close(graceful=False)  # a faulted worker is discarded, whatever state it is in
            recovered = False
            rel_error = None
            ready_s = 0.0
            try:
                worker = WorkerProcess(worker_command)
                ready_s = worker.ready_s
                answer = worker.request({"op": "compute", "seed": index + 1})
                recovered = bool(answer.get("correct")) and detected_by != "not detected"
                rel_error = answer.get("rel_error")
                if not answer.get("correct"):
                    note = (note + "; " if note else "") + f"the new worker computed wrong: {answer}"
            except WorkerGone as exc:
                note = (note + "; " if note else "") + f"no working replacement: {exc}"
            finished = time.perf_counter()
            results.append(StickyTrial(index, bool(response.get("faulted", detected_by != "not detected")),
                                       response.get("cuda_error"), response.get("cuda_error_name"), detected_by,
                                       old_exit, recovered, detected - sent, finished - detected, ready_s,
                                       rel_error, note))
            if not recovered and worker.proc.poll() is not None:
                break  # no worker left to go on with
    finally:
        worker.close()
    return results


def run_recovery(trials: int = 5) -> RecoveryReport:
    from opgate.gpu.judge.cuda_errors import explain_cuda_error
    from opgate.gpu.probes.device import gpu_unavailable_reason

    started = time.perf_counter()
    reason = gpu_unavailable_reason()
    if reason:
        return RecoveryReport("skipped", reason)
    try:
        sticky = run_sticky_trials(trials) if trials else []
    except WorkerGone as exc:
        return RecoveryReport("failed", f"the recovery trials could not run: {exc}",
                              duration_s=time.perf_counter() - started)
    codes = {t.cuda_error for t in sticky if t.cuda_error is not None}
    explanation = " ".join(info.one_line() for code in sorted(codes) if (info := explain_cuda_error(code)))
    ok = all(t.recovered for t in sticky)
    report = RecoveryReport("passed" if ok else "failed", "", tuple(sticky), explanation,
                            time.perf_counter() - started)
    s = report.summary()
    parts = []
    if sticky:
        parts.append(f"sticky error: {sum(t.recovered for t in sticky)}/{len(sticky)} recovered by restarting the "
                     f"worker, mean {s['sticky_mean_recover_s'] or 0:.2f} s to a verified answer")
    return RecoveryReport(report.status, "; ".join(parts), report.sticky, explanation, report.duration_s)


def main(argv: list[str] | None = None) -> int:
    from gpu_sanitizer_tool import exit_on_sigterm

    exit_on_sigterm()  # so the trials' finally blocks kill their worker processes
    parser = argparse.ArgumentParser(prog="tests/data/gpu/gpu_recovery.py",
                                     description="Sticky CUDA error recovery trials.")
    parser.add_argument("--trials", type=int, default=5, help="sticky-error trials (default 5)")
    parser.add_argument("--json", help="write the report here")
    ns = parser.parse_args(argv)
    if ns.trials < 0:
        parser.error("--trials must be >= 0")
    report = run_recovery(ns.trials)
    if ns.json:
        Path(ns.json).parent.mkdir(parents=True, exist_ok=True)
        write_atomically(Path(ns.json), json.dumps(report.to_dict(), indent=2))
    for trial in report.sticky:
        print(f"sticky #{trial.index}: error {trial.cuda_error} ({trial.cuda_error_name}) {trial.detected_by}, "
              f"old worker exit {trial.old_worker_exit}, recovered={trial.recovered} in {trial.recover_s:.2f} s "
              f"{trial.note}")
    print(f"recovery: {report.status}: {report.reason}")
    if report.explanation:
        print(report.explanation)
    return 0 if report.status in ("passed", "skipped") else 1


if __name__ == "__main__":
    sys.exit(main())
