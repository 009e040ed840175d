"""A spec file's operators, loaded once per process: a warm worker runs many checks of the same spec, and
re-importing the user's module would re-create its Triton kernels (and recompile them) for every check."""

from __future__ import annotations

import os
from typing import Any

_LOADED: dict[tuple[str, int, int], list[Any]] = {}


def loaded_operators(spec_file: str) -> list[Any]:
    """The spec's operators with their derived `<op>.grad` twins (verify/gradients.py); loaded again only when
    the file changed (size or modification time)."""
    from opgate.core.spec import load_spec_file
    from opgate.verify.gradients import with_gradient_operators

    stat = os.stat(spec_file)
    key = (os.path.abspath(spec_file), stat.st_mtime_ns, stat.st_size)
    if key not in _LOADED:
        _LOADED.clear()  # one spec per worker: an old version's module goes
        _LOADED[key] = with_gradient_operators(load_spec_file(spec_file))
    return _LOADED[key]

