"""Runtimes an implementation can need, found as plugins in the `opgate.verify.backends` entry-point group.

Shipped: torch (eager), torch.compile, triton, onnxruntime, tvm (pyproject.toml). Each is a `Backend`
(backends/base.py) whose `prepare(choice, op, dtype, workdir) -> PreparedImplementation` runs inside the
implementation's own child process and raises SkipCheck when the runtime is not usable there.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from opgate.engine.plugins import VERIFY_BACKENDS_GROUP, entry_points, load
from opgate.verify.backends.base import Backend, ImplementationChoice, PreparedImplementation


@lru_cache(maxsize=None)
def backend(name: str) -> Backend:
    """The registered backend called `name` (loaded on first use)."""
    targets = entry_points(VERIFY_BACKENDS_GROUP)
    if name not in targets:
        raise KeyError(f"no verify backend {name!r} is registered; known: {', '.join(targets)}")
    instance = load(targets[name])()
    if not isinstance(instance, Backend):
        raise TypeError(f"verify backend plugin {name!r} ({targets[name]}) is not an opgate Backend")
    return instance


def backend_names() -> tuple[str, ...]:
    return tuple(entry_points(VERIFY_BACKENDS_GROUP))


def extra_backend_names() -> tuple[str, ...]:
    """Backends opgate runs the reference through as extras, in their rank order."""
    extras = [backend(name) for name in backend_names()]
    return tuple(b.name for b in sorted((b for b in extras if b.extra), key=lambda b: (b.extra_rank, b.name)))


def prepare(choice: ImplementationChoice, op: Any, dtype: str, workdir: Path) -> PreparedImplementation:
    return backend(choice.backend).prepare(choice, op, dtype, workdir)


__all__ = ["Backend", "ImplementationChoice", "PreparedImplementation", "backend", "backend_names",
           "extra_backend_names", "prepare"]
