"""Child processes that never outlive opgate: each its own process group, killed as a group, and on Linux
killed by the kernel when opgate dies (PR_SET_PDEATHSIG). Plumbing below every layer: the runner, the
collectives launcher and the tools that start children use it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Any


# prctl(2) option: the signal the kernel sends this process when its parent thread exits.
PR_SET_PDEATHSIG = 1
_LIVE_CHILDREN: set[subprocess.Popen[Any]] = set()
STOPPING = threading.Event()  # set once the run is being interrupted: start no more children


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


def signal_process_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL a child's whole process group (its grandchildren too), without waiting for it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_process_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL a child's whole process group (its grandchildren too) and reap it."""
    kill_process_groups([proc])


def kill_process_groups(procs: Any) -> None:
    """SIGKILL every child's group first, then reap them: a process holding a CUDA context takes a moment to die
    (the driver tears the context down), and killing 30 GPU workers one after another outlasted a CI runner's
    SIGTERM-to-SIGKILL grace on the H200 host, losing the interrupted run's report."""
    procs = list(procs)
    for proc in procs:
        signal_process_group(proc)
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        unregister_child(proc)


def kill_all_children() -> None:
    """Kill every child opgate started that is still registered (the interrupt path); threads that start children
    see `STOPPING` set and start no more."""
    STOPPING.set()
    kill_process_groups(list(_LIVE_CHILDREN))


def exit_without_teardown(code: int) -> None:
    """Flush stdout and stderr and end the process now, skipping the interpreter's teardown: for a process whose
    results are already on disk (a warm worker at the end of its input, the spec's pre-flight child, the CLI after
    its reports). Unwinding torch, Triton and a CUDA context costs seconds, and atexit hooks or threads that user
    code started cannot change what was written."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
