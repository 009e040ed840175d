"""Write a file atomically: a temp file beside the target, then rename. Never a partial file.

Plumbing below every layer: reports, a worker's result file, a rank's result and the caches all go through it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from opgate.model.errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomically(path: Path, data: str | bytes, *, durable: bool = True) -> None:
    """`data` at `path`, whole or not at all. `durable=False` skips the fsync (a scratch file that only
    has to survive the writer's own crash, written many times a second)."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"cannot write report {path}: folder {parent} does not exist; create it or pick another path")
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, mode) as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.chmod(tmp_name, 0o666 & ~_umask())  # mkstemp makes 0600; a report is an ordinary file
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
