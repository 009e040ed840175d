"""The GPU guard: `opgate verify` runs on one host do not starve each other's GPU stages.

Within one run the runner keeps a measuring (`exclusive`) task alone on its GPU. Across runs nothing did: on a CI
host two `opgate verify` runs shared one card, one run's recovery stage filled it, and the other run's numerics
cases ran out of memory. The guard is a host-wide reader-writer lock per physical GPU, taken by the runner (the one
place tasks start) before a task that uses the GPU starts, and released when it ends:

- exclusive tasks (runtime timing, recovery, ncu, qos) take their GPU's lock exclusively, the others (numerics,
  sanitizer) shared: many share a GPU, a measurement or a card-filling recovery stage has it alone;
- locks are `flock(2)` on files in one directory (OPGATE_GPU_LOCK_DIR, default /tmp/opgate-gpu-locks: host-wide
  for every user, unlike $XDG_RUNTIME_DIR; containers share it only through a mounted directory), named by the
  GPU's UUID (opgate.probes.gpu_identity); the kernel drops them when a process dies, so a crash leaves none behind;
- writers go first: an exclusive request holds the GPU's *gate* while it waits for the shared holders to finish,
  and a shared request passes the gate only while no writer holds it, so a stream of numerics tasks of one run
  cannot starve another run's recovery stage;
- nothing blocks: the runner polls (`GpuLockRequest.poll`), so a waiting task keeps its place in the queue; the
  seconds it waited are a figure of its result, and a wait past OPGATE_GPU_WAIT_S (default 1800 s) is an `error`
  naming who holds the GPU, never a hang.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

LOCK_DIR_ENV = "OPGATE_GPU_LOCK_DIR"
WAIT_ENV = "OPGATE_GPU_WAIT_S"
DEFAULT_LOCK_DIR = Path("/tmp/opgate-gpu-locks")
# Longer than any one task of another run holds a GPU (verify's longest GPU task timeout is 600 s) with two of them
# queued: a wait past it is a stuck holder or a host overbooked with runs, reported instead of waited out.
DEFAULT_WAIT_S = 1800.0
SHARED = "shared"
EXCLUSIVE = "exclusive"
# Where the keys of a host without NVML go: every run there locks the one key (safe, if coarse).
UNIDENTIFIED = "gpu-unidentified"


def lock_dir() -> Path:
    return Path(os.environ.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR)


def wait_limit_s() -> float:
    try:
        return float(os.environ.get(WAIT_ENV, DEFAULT_WAIT_S))
    except ValueError:
        return DEFAULT_WAIT_S


def _safe(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", key)


def _open(path: Path) -> int:
    """A descriptor for flock: created world-writable, so the runs of every user share it; read-only is enough to
    lock a file another user created."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except PermissionError:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)  # the umask narrowed the mode of a file this call created
    return fd


def _try_flock(fd: int, operation: int) -> bool:
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


@dataclass
class GpuLockRequest:
    """One task's claim on its GPUs' locks, polled until held (see the module docstring); release() always."""

    keys: tuple[str, ...]
    mode: str  # SHARED | EXCLUSIVE
    holder: str = ""  # who asks: written beside an exclusive lock, so a waiting run can say who holds the GPU
    directory: Path = field(default_factory=lock_dir)
    _fds: dict[str, int] = field(default_factory=dict)  # "<key>.gate" / "<key>.lock" -> open descriptor
    _held: set[str] = field(default_factory=set)

    def _fd(self, name: str) -> int:
        if name not in self._fds:
            self.directory.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                os.chmod(self.directory, 0o1777)  # like /tmp: every user may add locks, none remove another's
            self._fds[name] = _open(self.directory / name)
        return self._fds[name]

    def _take(self, name: str, operation: int) -> bool:
        if name in self._held:
            return True
        if _try_flock(self._fd(name), operation):
            self._held.add(name)
            return True
        return False

    def _drop(self, name: str) -> None:
        if name in self._held:
            fcntl.flock(self._fds[name], fcntl.LOCK_UN)
            self._held.discard(name)

    def poll(self, past_the_gate: bool = False) -> bool:
        """Try once, without blocking; True when every key is held in the mode asked. `past_the_gate`: a shared
        request of a task that held the lock until a moment ago (a measurement window lent it) takes it back without
        stopping at a waiting writer's gate, as if it had kept it."""
        for key in sorted(self.keys):  # one order for every process: no two requests wait on each other's keys
            gate, main = f"{_safe(key)}.gate", f"{_safe(key)}.lock"
            if past_the_gate and self.mode == SHARED:
                if not self._take(main, fcntl.LOCK_SH):
                    self._drop_all()
                    return False
                continue
            if self.mode == EXCLUSIVE:
                # keep the gate while waiting for the main lock: new shared requests stop at it
                if not (self._take(gate, fcntl.LOCK_EX) and self._take(main, fcntl.LOCK_EX)):
                    return False
                self._note_holder(key)
                continue
            if main in self._held:
                continue
            passed = self._take(gate, fcntl.LOCK_SH) and self._take(main, fcntl.LOCK_SH)
            self._drop(gate)  # a reader only passes the gate
            if not passed:
                self._drop_all()  # a reader keeps nothing while it waits: it cannot hold up a writer
                return False
        return True

    def _note_holder(self, key: str) -> None:
        with contextlib.suppress(OSError):
            (self.directory / f"{_safe(key)}.holder").write_text(json.dumps(
                {"pid": os.getpid(), "task": self.holder, "since": time.time()}))

    def _drop_all(self) -> None:
        for name in list(self._held):
            self._drop(name)

    def release(self) -> None:
        """Drop every lock (an exclusive holder's note first) and close the files."""
        if self.mode == EXCLUSIVE:
            for key in self.keys:
                if f"{_safe(key)}.lock" in self._held:
                    with contextlib.suppress(OSError):
                        (self.directory / f"{_safe(key)}.holder").unlink()
        self._drop_all()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def who_holds(self) -> str:
        """The exclusive holder of one of the keys, as its note says (while its process lives), or ''."""
        for key in sorted(self.keys):
            try:
                note = json.loads((self.directory / f"{_safe(key)}.holder").read_text())
                pid = int(note["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if pid != os.getpid() and process_alive(pid):
                return f"opgate pid {pid} ({note.get('task', '?')})"
        return ""


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs (one of another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


KeysFor = Callable[[int | None], Sequence[str]]


def keys_from_nvml(device: int | None) -> tuple[str, ...]:
    """The lock keys of this process's CUDA device `device` (None: the default, 0): its GPU's UUID, every candidate
    where the mapping is uncertain, UNIDENTIFIED without NVML."""
    from opgate.probes.gpu_identity import candidate_uuids, physical_gpus
    from opgate.probes.nvml import is_available

    gpus = physical_gpus()
    if not is_available(gpus) or not gpus:
        return (UNIDENTIFIED,)
    pci_order = os.environ.get("CUDA_DEVICE_ORDER", "") == "PCI_BUS_ID"
    keys = candidate_uuids(device or 0, os.environ.get("CUDA_VISIBLE_DEVICES"), gpus, pci_order)  # type: ignore[arg-type]
    return keys or (UNIDENTIFIED,)


class GpuGuard:
    """The runner's side: which keys a task locks (cached per device), its request while it waits, the wait."""

    def __init__(self, keys_for: KeysFor = keys_from_nvml, wait_s: float | None = None,
                 directory: Path | None = None) -> None:
        self._keys_for = keys_for
        self._keys: dict[int | None, tuple[str, ...]] = {}
        self.wait_s = wait_limit_s() if wait_s is None else wait_s
        self.directory = directory or lock_dir()

    def keys(self, device: int | None) -> tuple[str, ...]:
        if device not in self._keys:
            self._keys[device] = tuple(self._keys_for(device))
        return self._keys[device]

    def request(self, device: int | None, exclusive: bool, holder: str) -> GpuLockRequest:
        return GpuLockRequest(self.keys(device), EXCLUSIVE if exclusive else SHARED, holder, self.directory)


@dataclass
class Waiting:
    """A task's claim while the runner polls it: since when, whether the first try failed."""

    request: GpuLockRequest
    limit_s: float = DEFAULT_WAIT_S
    since: float = field(default_factory=time.monotonic)
    blocked: bool = False  # a poll failed: another run held the GPU
    granted_after_s: float | None = None  # how long it waited once it held the locks

    def waited_s(self) -> float:
        return time.monotonic() - self.since if self.blocked else 0.0
