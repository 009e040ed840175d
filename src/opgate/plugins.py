"""Entry-point plugins: how opgate finds its doctor checks, verify stages and verify backends.

Shipped parts are plugins like any other: pyproject.toml declares them in these groups, and a third-party
package adds its own by declaring entry points in the same groups, without touching opgate. When opgate runs
from a source tree that is not installed (`PYTHONPATH=src python -m opgate`), there is no distribution
metadata, so the tree's pyproject.toml is read for the shipped declarations.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

CHECKS_GROUP = "opgate.checks"
VERIFY_STAGES_GROUP = "opgate.verify.stages"
VERIFY_BACKENDS_GROUP = "opgate.verify.backends"


@lru_cache(maxsize=1)
def _source_tree_groups() -> dict[str, dict[str, str]]:
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.is_file():
        return {}
    try:
        import tomllib  # type: ignore[import-not-found]
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    data = tomllib.loads(pyproject.read_text())
    return dict(data.get("project", {}).get("entry-points", {}))


def entry_points(group: str) -> dict[str, str]:
    """name -> "module:attr" of every plugin in `group`: installed distributions first, then (when opgate
    itself is not installed) the source tree's declarations for names not already taken."""
    found = {ep.name: ep.value for ep in metadata.entry_points(group=group)}
    try:
        metadata.distribution("opgate")
    except metadata.PackageNotFoundError:
        for name, target in _source_tree_groups().get(group, {}).items():
            found.setdefault(name, target)
    return dict(sorted(found.items()))


def load(target: str) -> Any:
    """The object a "module:attr" target names (imported now)."""
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module
