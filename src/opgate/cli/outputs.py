"""Output paths checked before any work: a report that cannot be written is bad input, found up front.

`--json /nonexistent/dir/r.json` used to run every check and only then fail; a directory, a path under
/proc or a read-only folder gave a traceback. `check_report_path` tries what the atomic writer will do
(create a temp file beside the target) and removes it again, so every such case is one line, exit 2.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from opgate.model.errors import InputError

# The file name the error lines suggest for each report option.
EXAMPLE_NAMES = {"--junit": "report.xml", "--html": "report.html", "--markdown": "summary.md"}


def check_report_path(path: Path | None, option: str) -> None:
    """Raise InputError unless a report file can be written atomically at `path` (None: nothing to check)."""
    if path is None:
        return
    path = Path(path)
    where = f"{option} {path}"
    example = EXAMPLE_NAMES.get(option, "report.json")
    if str(path) in ("", "-"):
        raise InputError(f"{where}: give a file path for the report, e.g. {option} {example}")
    if path.is_dir():
        raise InputError(f"{where} is a directory; give a file path inside it, e.g. {option} {path / example}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        missing = "is not a directory" if parent.exists() else "does not exist"
        raise InputError(f"{where}: folder {parent} {missing}; create it or pick another path")
    if path.exists() and not os.access(path, os.W_OK):
        raise InputError(f"{where} exists and is not writable; pick another path or fix its permissions")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=parent)
    except OSError as exc:
        raise InputError(f"{where}: cannot create a file in {parent} ({exc.strerror or exc}); "
                         "pick a folder you can write to") from None
    os.close(fd)
    os.unlink(probe)


def check_output_folder(path: Path | None, option: str) -> None:
    """Raise InputError unless `path` is (or can become) a writable folder; creates nothing."""
    if path is None:
        return
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{option} {path} is a file, not a folder; give a folder for the artefacts")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"{option} {path}: {existing} is not a folder; give a folder for the artefacts")
    try:
        fd, probe = tempfile.mkstemp(prefix=".opgate-", suffix=".probe", dir=existing)
    except OSError as exc:
        raise InputError(f"{option} {path}: cannot create files in {existing} ({exc.strerror or exc}); "
                         "pick a folder you can write to") from None
    os.close(fd)
    os.unlink(probe)


def check_distinct_outputs(paths: dict[str, Path | str | None]) -> None:
    """Raise InputError when two report options name the same file: each writer would replace the other's report
    while the run said it wrote both (`--json X --html X`)."""
    seen: dict[str, str] = {}
    for option, path in paths.items():
        if path is None or "://" in str(path):  # a database URL is not a file here
            continue
        key = os.path.realpath(os.path.expanduser(str(path)))
        if key in seen:
            raise InputError(f"{seen[key]} and {option} both name {path}; give each report its own file")
        seen[key] = option
