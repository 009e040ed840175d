"""Entry-point plugins: how opgate finds its doctor checks, verify stages, verify backends and each verb's
report renderers.

Shipped parts are plugins like any other: pyproject.toml declares them in these groups, and a third-party
package adds its own by declaring entry points in the same groups, without touching opgate. When opgate runs
from a source tree (`PYTHONPATH=src python -m opgate`, or an editable install), the tree's pyproject.toml is
read for the shipped declarations.
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
RENDERERS_GROUP = "opgate.report.renderers"  # each verb's renderers (opgate.reporting.renderers.VerbRenderers)


@lru_cache(maxsize=1)
def _source_tree_groups() -> dict[str, dict[str, str]]:
    pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"  # REPO/src/opgate/engine/plugins.py
    if not pyproject.is_file():
        return {}
    try:
        import tomllib  # type: ignore[import-not-found]
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    data = tomllib.loads(pyproject.read_text())
    return dict(data.get("project", {}).get("entry-points", {}))


def entry_points(group: str) -> dict[str, str]:
    """name -> "module:attr" of every plugin in `group`, by name. When this opgate runs from a source tree (also
    an editable install, whose metadata goes stale as pyproject.toml changes), the tree's own declarations
    stand for opgate's; installed third-party plugins are added either way."""
    tree = _source_tree_groups()
    found: dict[str, str] = {}
    for ep in metadata.entry_points(group=group):
        dist = getattr(getattr(ep, "dist", None), "name", "")
        if tree and (dist or "").lower() == "opgate":
            continue  # opgate's own, read from the tree below
        found.setdefault(ep.name, ep.value)
    for name, target in tree.get(group, {}).items():
        found[name] = target
    return dict(sorted(found.items()))


def load(target: str) -> Any:
    """The object a "module:attr" target names (imported now)."""
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module
