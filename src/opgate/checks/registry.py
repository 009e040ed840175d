"""Find checks through the `opgate.checks` entry-point group.

Shipped checks are plugins like any other: they are declared in pyproject.toml (opgate/engine/plugins.py
finds them, installed or from a source tree).
"""

from __future__ import annotations

from dataclasses import dataclass

from opgate.model.errors import InputError
from opgate.engine.plugins import CHECKS_GROUP as ENTRY_POINT_GROUP
from opgate.engine.plugins import entry_points, load


@dataclass(frozen=True)
class CheckSpec:
    """Where a check lives: `target` is "module:Class". Loaded lazily, in the child process."""

    name: str
    target: str

    def load(self) -> type:
        return load(self.target)  # type: ignore[no-any-return]


def discover_checks() -> list[CheckSpec]:
    """All registered checks, installed plugins included, sorted by name for a stable order."""
    return [CheckSpec(name, target) for name, target in entry_points(ENTRY_POINT_GROUP).items()]


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
