"""Run code the moment a module is imported, by whoever imports it, without importing it ourselves.

The sanitized child must turn CuPy's memory pools off before an implementation allocates through them (memcheck
cannot see an access past a tensor inside a pool's block), but importing CuPy just to do that cost every sanitized
child ~2 CPU-s on the H200 host (88 CPU-s of a library run's, py-spy, twenty-seventh session), whether or not its
implementation uses CuPy. `after_import` defers that work to CuPy's own import.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    import importlib.machinery


class _ThenLoader:
    """The module's own loader, then `then(module)` once the module has executed. (Loaders and finders are duck
    typed: importlib.abc cost `import opgate` 12 ms, and every opgate process imports it.)"""

    def __init__(self, loader: Any, then: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._then = then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        # the module keeps its own loader (resources, source, reloads go to it)
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._then(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)  # what a module asks its loader for while it runs (resource readers)


class _AfterImport:
    """Finds nothing itself: for `name` it returns the spec the other finders give, with a loader that calls
    `then` after the module's code has run. It removes itself on first use."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.then = then

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _ThenLoader(spec.loader, self.then)
        return spec


def after_import(name: str, then: Callable[[ModuleType], None]) -> None:
    """Call `then(module)` once the top-level module `name` is imported: now if it already is, else right after
    its first import (its submodules import as usual)."""
    module = sys.modules.get(name)
    if module is not None:
        then(module)
        return
    sys.meta_path.insert(0, _AfterImport(name, then))
