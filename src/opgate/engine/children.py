"""Child processes that never outlive opgate: each its own process group, killed as a group, and on Linux
killed by the kernel when opgate dies (PR_SET_PDEATHSIG). Plumbing below every layer: the runner, the
collectives launcher and the tools that start children use it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


# prctl(2) options: the signal the kernel sends this process when its parent thread exits; and making this process
# the "child subreaper" that orphaned descendants are re-parented to (instead of init).
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_LIVE_CHILDREN: set[subprocess.Popen[Any]] = set()
STOPPING = threading.Event()  # set once the run is being interrupted: start no more children
# The pid of the process that forks, set in it just before every fork (subprocess runs the before-fork hooks when a
# preexec_fn is given), so a child knows its parent's pid without asking the kernel after the fact.
_FORKING_PID = os.getpid()


def _remember_forking_pid() -> None:
    global _FORKING_PID
    _FORKING_PID = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_remember_forking_pid)


def package_root() -> str:
    """The folder opgate is imported from (site-packages or a source tree's src/): put first on a child's
    PYTHONPATH so the child imports the same opgate as its parent."""
    return str(Path(__file__).resolve().parents[2])  # .../src/opgate/engine/children.py -> .../src


def known_signal(returncode: int) -> str | None:
    """The name of the signal that ended a child, from its negative returncode (-11: SIGSEGV); None for a number
    this platform has no name for."""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return None


def signal_name(returncode: int) -> str:
    """The signal that ended a child in words: its name, or "signal N" where it has none."""
    return known_signal(returncode) or f"signal {-returncode}"


def die_with_parent(parent_pid: int | None = None) -> None:
    """preexec_fn of every child: SIGKILL it when opgate dies (Linux); elsewhere a no-op. A process that calls it
    itself after it started (a spawned pool process) passes its parent's pid."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    # The parent died before prctl took effect: we were re-parented. Not `getppid() == 1`: opgate is PID 1 itself as
    # a container's entrypoint (deploy/image), and then every child would end here.
    if os.getppid() != (_FORKING_PID if parent_pid is None else parent_pid):
        os._exit(1)


def register_child(proc: subprocess.Popen[Any]) -> None:
    _LIVE_CHILDREN.add(proc)


def unregister_child(proc: subprocess.Popen[Any]) -> None:
    _LIVE_CHILDREN.discard(proc)


def signal_process_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL a child's whole process group (its grandchildren too), without waiting for it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_process_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL a child's whole process group (its grandchildren too) and reap it."""
    kill_process_groups([proc])


def kill_process_groups(procs: Any, wait_s: float = 10.0) -> None:
    """SIGKILL every child's group first, then reap them, waiting `wait_s` in all: a process holding a CUDA context
    takes a moment to die (the driver tears the context down), and killing 30 GPU workers one after another
    outlasted a CI runner's SIGTERM-to-SIGKILL grace on the H200 host, losing the interrupted run's report. One
    still dying when the time is up has been signalled: it dies without us."""
    import time

    procs = list(procs)
    for proc in procs:
        signal_process_group(proc)
    deadline = time.monotonic() + wait_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        unregister_child(proc)


# Seconds the interrupt path spends reaping, all of it together (children, calibration processes, warm workers): its
# report is written first, and a CI runner's SIGKILL follows SIGTERM within seconds (`timeout -k 5`). Each reaper
# waiting 2 s of its own added up to 6 s and ended two H200 library runs with SIGKILL (docs/benchmarks.md).
INTERRUPT_REAP_S = 2.0
_REAP_DEADLINE: list[float] = []  # when the interrupt path stops waiting, set by the first kill_all_children


def kill_all_children() -> None:
    """Kill every child opgate started that is still registered (the interrupt path); threads that start children
    see `STOPPING` set and start no more. The first call starts the interrupt's one reaping deadline."""
    import time

    if not STOPPING.is_set() or not _REAP_DEADLINE:
        _REAP_DEADLINE[:] = [time.monotonic() + INTERRUPT_REAP_S]
    STOPPING.set()
    kill_process_groups(list(_LIVE_CHILDREN), wait_s=reap_seconds_left(INTERRUPT_REAP_S))


def reap_seconds_left(otherwise: float) -> float:
    """How long a reaper may still wait: what is left of the interrupt's deadline once the run is stopping,
    else `otherwise`."""
    import time

    if STOPPING.is_set() and _REAP_DEADLINE:
        return max(0.0, _REAP_DEADLINE[0] - time.monotonic())
    return otherwise


def start_afresh() -> None:
    """A run in this process after an interrupted one (tests, the pytest plugin): children may start again."""
    STOPPING.clear()
    _REAP_DEADLINE.clear()


def exit_without_teardown(code: int) -> None:
    """Flush stdout and stderr and end the process now, skipping the interpreter's teardown: for a process whose
    results are already on disk (a warm worker at the end of its input, the spec's pre-flight child, the CLI after
    its reports). Unwinding torch, Triton and a CUDA context costs seconds, and atexit hooks or threads that user
    code started cannot change what was written."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux): a process an implementation started that left its
    process group (setsid) and outlived its parent becomes our child, where escaped_processes finds it. False where
    the platform has no such thing."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True)
class EscapedProcess:
    pid: int
    command: str
    started_by: str  # the check whose process started it (its OPGATE_CHECK_ID), "" when unknown


def escaped_processes(check_env: str = "OPGATE_CHECK_ID") -> list[EscapedProcess]:
    """Our children that are none of the ones opgate started and that left our session: descendants of a check
    that escaped its killed process group (setsid) and were re-parented to this subreaper. Linux /proc only."""
    me, my_session = os.getpid(), os.getsid(0)
    known = {proc.pid for proc in _LIVE_CHILDREN}
    found: list[EscapedProcess] = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            parent, session, state = int(fields[1]), int(fields[3]), fields[0]
            pid = int(entry.name)
            if parent != me or pid in known or session == my_session or state == "Z":
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):  # gone meanwhile, or not ours to read
            continue
        prefix = f"{check_env}=".encode()
        started_by = next((item[len(prefix):].decode(errors="replace") for item in environ
                           if item.startswith(prefix)), "")
        found.append(EscapedProcess(pid, command[:200], started_by))
    return found


def end_processes(processes: Any) -> None:
    """SIGKILL each escaped process's session (its own descendants too), then reap it."""
    for process in processes:
        for kill in (lambda: os.killpg(os.getpgid(process.pid), signal.SIGKILL),
                     lambda: os.kill(process.pid, signal.SIGKILL)):
            try:
                kill()
            except (ProcessLookupError, PermissionError):
                pass
    for process in processes:
        for _ in range(50):
            try:
                done, _ = os.waitpid(process.pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done:
                break
            time.sleep(0.02)


# Lines of a dead child's stderr a crash report shows.
STDERR_LINES_SHOWN = 12


def stderr_excerpt(text: str, max_lines: int = STDERR_LINES_SHOWN) -> list[str]:
    """The last lines of a dead child's stderr worth reading: the error lines and the innermost frames of a
    Python stack dump (faulthandler prints the most recent call first), not the interpreter's outer frames."""
    kept: list[str] = []
    frames_left: int | None = None  # inside a stack dump: how many more frames to keep
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith(("Extension modules:", "Total: ")):
            continue
        if stripped.startswith(("Current thread", "Thread 0x", "Stack (most recent call first)")):
            frames_left = 4
        elif stripped.startswith('File "') and frames_left is not None:
            if frames_left > 0:
                kept.append("  " + stripped[:200])
                frames_left -= 1
            continue
        else:
            frames_left = None
        kept.append(stripped[:200])
    return kept[-max_lines:]
