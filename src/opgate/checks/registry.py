"""Find checks through the `opgate.checks` entry-point group.

Shipped checks are plugins like any other: they are declared in pyproject.toml. When opgate runs
from a source tree that is not installed (`PYTHONPATH=src python -m opgate`), there is no
distribution metadata, so the same declarations are read from the tree's pyproject.toml.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from opgate.errors import InputError

ENTRY_POINT_GROUP = "opgate.checks"


@dataclass(frozen=True)
class CheckSpec:
    """Where a check lives: `target` is "module:Class". Loaded lazily, in the child process."""

    name: str
    target: str

    def load(self) -> type:
        module_name, _, attr = self.target.partition(":")
        module = importlib.import_module(module_name)
        return getattr(module, attr)


def _source_tree_entry_points() -> list[CheckSpec]:
    pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"
    if not pyproject.is_file():
        return []
    try:
        import tomllib  # type: ignore[import-not-found]
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    data = tomllib.loads(pyproject.read_text())
    group = data.get("project", {}).get("entry-points", {}).get(ENTRY_POINT_GROUP, {})
    return [CheckSpec(name, target) for name, target in group.items()]


def discover_checks() -> list[CheckSpec]:
    """All registered checks, installed plugins included, sorted by name for a stable order."""
    found = {ep.name: CheckSpec(ep.name, ep.value) for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    try:
        metadata.distribution("opgate")
    except metadata.PackageNotFoundError:
        for spec in _source_tree_entry_points():
            found.setdefault(spec.name, spec)
    return sorted(found.values(), key=lambda s: s.name)


def select_checks(prefix: str, only: list[str] | None = None) -> list[CheckSpec]:
    """Checks whose name starts with `prefix` (a verb, e.g. "doctor."), optionally narrowed by `only`."""
    specs = [s for s in discover_checks() if s.name.startswith(prefix)]
    if only:
        wanted = set(only)
        known = {s.name for s in specs} | {s.name.removeprefix(prefix) for s in specs}
        unknown = sorted(wanted - known)
        if unknown:
            names = ", ".join(s.name.removeprefix(prefix) for s in specs)
            raise InputError(f"--check {unknown[0]!r} is not a known check; choose from: {names}")
        specs = [s for s in specs if s.name in wanted or s.name.removeprefix(prefix) in wanted]
    return specs
