"""Stop a numerics case that runs far past its check's time budget, in the thread that runs it.

Under Triton's CPU interpreter a case's cost is predicted from the cases run before it (verify/time_budget.py), and
the prediction can be far off: the interpreter emulates every program instance in Python, and how many a kernel
launches is the kernel's choice. fla's global cumsum at B=1, T=1, H=65537 was predicted at ~9 s from the cases
before it and took 185 s (65537 programs), twice its check's 100 s budget. `stopped_after` raises CaseStopped in
the calling thread once the limit passes: the interpreter runs Python between program instances, so it arrives at
once, and its `finally` blocks restore what it patched. A BaseException, so no `except Exception` on the way (the
interpreter wraps kernel errors that way) mistakes it for the kernel's own error. Compiled kernels are not stopped
this way: the time goes into a C call (a compile, a launch), and the exception would arrive only after it.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from typing import Iterator


class CaseStopped(BaseException):
    """The case ran past its limit (stopped_after); it is reported as capped, not judged."""


def _raise_in(thread_id: int, exception: type[BaseException] | None) -> None:
    """Ask the interpreter to raise `exception` in thread `thread_id` at its next bytecode; None withdraws a pending
    one."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(exception) if exception is not None else None)


@contextlib.contextmanager
def stopped_after(seconds: float | None) -> Iterator[None]:
    """Run the body; past `seconds` (None: no limit) CaseStopped is raised inside it. A stop that fires as the body
    ends is withdrawn, so it never lands after the block."""
    if seconds is None:
        yield
        return
    target = threading.get_ident()
    lock = threading.Lock()
    state = {"ended": False, "fired": False}

    def fire() -> None:
        with lock:
            if not state["ended"]:
                state["fired"] = True
                _raise_in(target, CaseStopped)

    timer = threading.Timer(max(seconds, 0.0), fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            state["ended"] = True
            if state["fired"]:
                _raise_in(target, None)  # not delivered yet (the body ended first): withdrawn
        timer.cancel()
