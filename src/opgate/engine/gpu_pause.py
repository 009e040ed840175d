"""A check's side of a measurement window (the runner's side: opgate.engine.gpu_windows).

A timing or recovery check measures alone on its GPU. On a library the side-by-side tasks (numerics checks, runtime
warm-ups) hold the GPU for minutes while they mostly compile Triton kernels on the CPU, so the measurements used to
wait for the end of the run. A window lets them measure in between: the runner writes a flag file, each side-by-side
task that is pausable says it is quiet (a marker file named by its pid) once it is either inside a JIT compile (no GPU
work) or waiting at a pause point, and only when every one of them is quiet does a measurement start.

In a pausable task (the runner says so per request: engine/worker.py calls begin_task):
- compile_began / compile_ended bracket a JIT compile (Triton's jit hooks, installed by
  verify/backends/triton_backend.record_compiles, call them through verify/resume.compile_started/_finished, which
  mark the compile in a numerics check's journal too). The compile first waits for this process's GPU work in
  flight, so "compiling" means "nothing of mine on the GPU". Triton calls no hook after a compile that raises (an
  autotuner skips such a config and runs the others): the task is quiet while compiling only where record_compiles
  could also catch that end (compiles_tracked), else a task that went on with GPU work would still read as quiet.
- pause_point() is called where the task is about to use the GPU (before each implementation call, after each
  compile): while the flag exists and the runner that wrote it lives, it waits, marked paused, and the seconds it
  waited are left out of its case times (clock()) and out of the case's hang timer (hang_timer).
Everything here is a no-op outside a pausable task, so a measurement never pauses for its own window.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import time
from pathlib import Path
from typing import Iterator

from opgate.engine.gpu_guard import process_alive

PAUSE_DIR_ENV = "OPGATE_GPU_PAUSE_DIR"
FLAG = "measuring"
QUIET = "quiet"
COMPILING, PAUSED = "compiling", "paused"
POLL_S = 0.01
# The longest a pause point waits while the runner lives: it closes a window once its measurements end (their own
# timeouts bound them); a flag left by a runner that died is seen at once (the pid in it).
MAX_PAUSE_S = 1800.0

_STATE: dict[str, object] = {"active": False, "paused_s": 0.0, "compiling": False, "compiles_tracked": False,
                             "hang_deadline": None}


def folder() -> Path | None:
    raw = os.environ.get(PAUSE_DIR_ENV, "").strip()
    return Path(raw) if raw else None


def flag_path(root: Path) -> Path:
    return root / FLAG


# The windows the runner has closed, one "opened closed" line of epoch seconds each (gpu_windows.MeasurementWindows)
WINDOWS_LOG = "windows.log"


def windows_log(root: Path) -> Path:
    return root / WINDOWS_LOG


def window_seconds_since(epoch: float) -> float:
    """Seconds of this run's measurement windows since `epoch` (0 outside a run with windows): the time its
    side-by-side work waited, which a budget measured from `epoch` must not count (verify/check.py)."""
    root = folder()
    if root is None:
        return 0.0
    try:
        lines = windows_log(root).read_text().splitlines()
    except OSError:
        return 0.0
    total = 0.0
    for line in lines:
        try:
            opened, closed = (float(v) for v in line.split())
        except ValueError:
            continue
        total += max(0.0, closed - max(opened, epoch))
    return total


def quiet_marker(root: Path, pid: int) -> Path:
    return root / QUIET / str(pid)


def _own_marker() -> Path | None:
    root = folder()
    return quiet_marker(root, os.getpid()) if root is not None else None


def begin_task(pausable: bool) -> None:
    """A warm worker starts a task: pausable or not; no marker is left from the last one."""
    _STATE["active"] = bool(pausable) and folder() is not None
    _STATE["compiling"] = False
    _clear_marker()


def end_task() -> None:
    _STATE["active"] = False
    _STATE["compiling"] = False
    _STATE["hang_deadline"] = None
    _clear_marker()


def paused_seconds() -> float:
    return float(_STATE["paused_s"])  # type: ignore[arg-type]


def clock() -> float:
    """perf_counter without the seconds this process waited at pause points: a case's time as if never paused."""
    return time.perf_counter() - paused_seconds()


def _write_marker(state: str) -> None:
    marker = _own_marker()
    if marker is None:
        return
    with contextlib.suppress(OSError):
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(state)


def _clear_marker() -> None:
    marker = _own_marker()
    if marker is not None:
        with contextlib.suppress(OSError):
            marker.unlink()


def _synchronize() -> None:
    """Wait for this process's GPU work in flight, unless a CUDA graph is being captured (a synchronize would end
    the capture with an error). torch's synchronize is cudaDeviceSynchronize on the primary context, which CuPy and
    the CUDA runtime share: their streams are waited for too."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    with contextlib.suppress(Exception):
        if cuda is not None and cuda.is_initialized() and not cuda.is_current_stream_capturing():
            cuda.synchronize()


def _release_cached_memory() -> None:
    """Give the memory this process's allocators keep cached, not in use, back to the driver (torch's caching
    allocator, CuPy's default pools): a window's measurement needs the card's memory while this task waits, and the
    H100 probe run's paused tasks kept all 79 GiB, so its runtime checks ran out of memory. Not while a CUDA graph
    is being captured (freeing would invalidate the capture)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    with contextlib.suppress(Exception):
        if cuda is not None and cuda.is_initialized() and not cuda.is_current_stream_capturing():
            cuda.empty_cache()
    cupy = sys.modules.get("cupy")
    with contextlib.suppress(Exception):
        if cupy is not None:
            cupy.get_default_memory_pool().free_all_blocks()


def compiles_tracked(tracked: bool) -> None:
    """Set by record_compiles: whether a compile that raises ends the compile here too (module docstring)."""
    _STATE["compiles_tracked"] = bool(tracked)


def compile_began() -> None:
    if not _STATE["active"] or not _STATE["compiles_tracked"]:
        return
    _synchronize()  # every time: a compile whose end was missed must not leave its GPU work unwaited
    if window_asked_now():  # a compile is quiet: the window's measurement may need the cached memory
        _release_cached_memory()
    _STATE["compiling"] = True
    _write_marker(COMPILING)


def compile_ended() -> None:
    if not _STATE["active"]:
        return
    if _STATE["compiling"]:
        _STATE["compiling"] = False
        _clear_marker()  # first: a runner that reads no marker from now on waits for this task (or gives up)
    pause_point()


def _runner_alive(flag: Path) -> bool:
    """Whether the process that wrote the flag (its pid is the flag's text) still runs; True where it cannot tell."""
    try:
        text = flag.read_text()
    except OSError:
        return flag.exists()
    try:
        pid = int(text.strip())
    except ValueError:  # being written (not atomically): its pid comes next
        return True
    return process_alive(pid)


def _window_asked(root: Path) -> bool:
    flag = flag_path(root)
    return flag.exists() and _runner_alive(flag)


def window_asked_now() -> bool:
    """Whether a measurement window of this process's run is asked for or open now (its flag is there and its
    runner lives): a measurement that runs out of memory now ran beside the run's paused tasks."""
    root = folder()
    return root is not None and _window_asked(root)


def pause_point() -> None:
    """Wait here while a measurement window is asked for or open (module docstring)."""
    if not _STATE["active"]:
        return
    root = folder()
    if root is None or not _window_asked(root):
        return
    began = time.perf_counter()
    _synchronize()
    _release_cached_memory()
    hang_deadline: float | None = _STATE["hang_deadline"]  # type: ignore[assignment]
    if hang_deadline is not None:  # a pause is not the case's time: its hang timer stops meanwhile
        faulthandler.cancel_dump_traceback_later()
    try:
        while True:
            _write_marker(PAUSED)
            while _window_asked(root) and time.perf_counter() - began < MAX_PAUSE_S:
                time.sleep(POLL_S)
            _clear_marker()
            # the runner may have asked again between the loop's last look and the marker's removal: it would count
            # this task quiet while it goes on
            if not _window_asked(root) or time.perf_counter() - began >= MAX_PAUSE_S:
                break
    finally:
        _STATE["paused_s"] = paused_seconds() + time.perf_counter() - began
        if hang_deadline is not None:
            faulthandler.dump_traceback_later(max(hang_deadline - clock(), 1.0), exit=True)


@contextlib.contextmanager
def hang_timer(seconds: float) -> Iterator[None]:
    """Dump the stack and exit the process if the body runs past `seconds` (faulthandler: a hung implementation
    call); the time the body waits at pause points does not count."""
    _STATE["hang_deadline"] = clock() + seconds
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        _STATE["hang_deadline"] = None
        faulthandler.cancel_dump_traceback_later()

