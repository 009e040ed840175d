"""opgate's temporary work folders, each with its owner written inside, and the sweep of those whose owner died.

A run removes its work folder when it ends, however it ends, except when it is killed with SIGKILL (a CI runner's
last resort, a test that kills a run on purpose): then nothing of it can clean up, and its folder stays in the
temporary folder for good. So every work folder records its owner (`owner.json`: the process id, the process's
start time in clock ticks since boot, and its PID namespace), and every new one first removes the folders of the
same prefix whose owner is gone: no process with that id, or one that started at another time (the id was reused).
A folder whose owner lives in another PID namespace (another container sharing /tmp) is left alone, as is one with
no readable owner (an older opgate, or one being created right now).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

OWNER_FILE = "owner.json"


def _start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks after boot: /proc/PID/stat field 22), or None when there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: count the fields after its closing one
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def process_age_s() -> float | None:
    """Seconds since this process started (its start in /proc against /proc/uptime, to the clock tick), or None off
    Linux: where a run's wall time went before its report's clock started (interpreter, imports, spec load)."""
    ticks = _start_ticks(os.getpid())
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return None if ticks is None else round(uptime - ticks / os.sysconf("SC_CLK_TCK"), 2)


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:  # not Linux, or /proc hidden: every owner is taken as ours (its pid and start time still tell)
        return ""


def owner_record() -> dict[str, object]:
    """What a work folder says about the process that made it."""
    return {"pid": os.getpid(), "start_ticks": _start_ticks(os.getpid()), "pid_namespace": _pid_namespace()}


def _orphaned(folder: Path, namespace: str) -> bool:
    try:
        owner = json.loads((folder / OWNER_FILE).read_text())
        pid, ticks = int(owner["pid"]), owner.get("start_ticks")
    except (OSError, ValueError, KeyError, TypeError):
        return False  # no owner said: not ours to judge
    if owner.get("pid_namespace", "") != namespace:
        return False  # another container's process ids mean nothing here
    alive = _start_ticks(pid)
    return alive is None or (ticks is not None and alive != ticks)


def sweep_orphans(prefix: str, root: Path | None = None) -> list[Path]:
    """Remove the work folders of `prefix` under `root` (the temporary folder) whose owner is gone; the ones
    removed. Never raises: a folder that cannot be read or removed stays."""
    root = Path(root or tempfile.gettempdir())
    namespace = _pid_namespace()
    removed = []
    try:
        candidates = [p for p in root.iterdir() if p.name.startswith(prefix) and p.is_dir()]
    except OSError:
        return []
    for folder in candidates:
        if _orphaned(folder, namespace):
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                removed.append(folder)
    return removed


@contextlib.contextmanager
def owned_workdir(prefix: str, root: Path | None = None) -> Iterator[Path]:
    """A fresh temporary folder with its owner written inside (removed on exit), after sweeping the folders of the
    same prefix left by runs that were killed."""
    sweep_orphans(prefix, root)
    with tempfile.TemporaryDirectory(prefix=prefix, dir=root) as tmp:
        folder = Path(tmp)
        try:
            (folder / OWNER_FILE).write_text(json.dumps(owner_record()))
        except OSError:  # the sweep is a courtesy: a folder without an owner is simply never swept
            pass
        yield folder
