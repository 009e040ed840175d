"""Compiled bytecode for a run's child processes where the environment turns Python's own cache off.

A verify run starts a hundred or more Python processes (check workers, calibration processes, sanitized and
probe children), and each imports torch and the library under test. Where the installed modules carry no
bytecode (`pip install --no-compile`, images stripped of __pycache__) and the environment forbids writing it
(PYTHONDONTWRITEBYTECODE=1, set by many container images), every one of those processes compiles the same
~1,700 modules from source again. On the H200 host that was 5.4 of the 10.2 CPU seconds of importing fla.modules
(cProfile: `builtins.compile`, 1,733 calls), paid by every check worker, calibration process and sanitized child.

So when the modules the children import first (torch, else opgate itself) have no bytecode to read and Python may
not write it next to them, the run's processes write and read it in one folder of opgate's own instead
(PYTHONPYCACHEPREFIX): nothing is written into the installed trees, which is what PYTHONDONTWRITEBYTECODE is there
for. The folder is the disk cache's (bounds_cache.cache_root()/bytecode: a later run starts warm), or the run's
temporary folder when caching is off. Nothing changes where the bytecode exists or Python writes it itself, or with
OPGATE_BYTECODE_CACHE=0. Python checks each cached file against its source's size and mtime, as in __pycache__.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Iterator

PREFIX_ENV = "PYTHONPYCACHEPREFIX"
DONT_WRITE_ENV = "PYTHONDONTWRITEBYTECODE"
OPT_OUT_ENV = "OPGATE_BYTECODE_CACHE"  # "0": leave Python's bytecode settings as they are
FOLDER = "bytecode"
# What a child imports first and most of, in order: the first one installed decides whether the children compile
PROBED_MODULES = ("torch", "opgate")


def _source_of(module: str) -> Path | None:
    """The module's source file, found without importing it (None when it is not installed or has no source)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    if not origin or not origin.endswith(".py"):
        return None
    return Path(origin)


def children_would_compile(sources: list[Path]) -> bool:
    """Whether a child would compile these modules from source on every start: no bytecode where Python looks
    for it (honouring a PYTHONPYCACHEPREFIX already set), and Python would not write it there (writing disabled,
    or the folder not writable)."""
    writes = not sys.dont_write_bytecode and not os.environ.get(DONT_WRITE_ENV)
    for source in sources:
        if Path(importlib.util.cache_from_source(str(source))).exists():
            return False
        if writes and (sys.pycache_prefix or os.access(source.parent, os.W_OK)):
            return False  # Python writes it itself on the first import
    return bool(sources)


@contextlib.contextmanager
def shared_bytecode(folder: Path) -> Iterator[str]:
    """While the run lasts: its children (which inherit os.environ) and this process write and read bytecode in
    `folder`, if children_would_compile; yields what was decided, for the report. Restores everything after."""
    if os.environ.get(OPT_OUT_ENV, "").strip() == "0":
        yield f"left as it is ({OPT_OUT_ENV}=0)"
        return
    first = next((source for source in map(_source_of, PROBED_MODULES) if source is not None), None)
    if not children_would_compile([first] if first is not None else []):
        yield "Python's own"
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        yield f"left as it is ({folder} cannot be made: {exc.strerror})"
        return
    saved_env = {name: os.environ.get(name) for name in (PREFIX_ENV, DONT_WRITE_ENV)}
    saved_sys = (sys.pycache_prefix, sys.dont_write_bytecode)
    os.environ[PREFIX_ENV] = str(folder)
    os.environ.pop(DONT_WRITE_ENV, None)
    sys.pycache_prefix, sys.dont_write_bytecode = str(folder), False
    try:
        yield f"shared in {folder}"
    finally:
        sys.pycache_prefix, sys.dont_write_bytecode = saved_sys
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
