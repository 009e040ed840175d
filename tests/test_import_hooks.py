"""opgate.engine.import_hooks: code that runs when a module is imported, by whoever imports it."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from opgate.engine.import_hooks import after_import


def _package(root: Path, name: str) -> None:
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("from . import part\nLOADED = True\n")
    (root / name / "part.py").write_text("VALUE = 3\n")


def test_the_hook_runs_after_the_first_import_and_only_then(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path, "opgate_hook_pkg")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[tuple[bool, int]] = []
    after_import("opgate_hook_pkg", lambda m: seen.append((m.LOADED, m.part.VALUE)))
    try:
        assert seen == [] and "opgate_hook_pkg" not in sys.modules  # nothing imported by the hook itself
        module = importlib.import_module("opgate_hook_pkg")
        assert seen == [(True, 3)] and module.LOADED  # after the package's code, its submodules in place
        assert type(module.__loader__).__name__ != "_ThenLoader" and module.__spec__.loader is module.__loader__
        importlib.import_module("opgate_hook_pkg.part")
        assert seen == [(True, 3)]
        assert not any(type(f).__name__ == "_AfterImport" for f in sys.meta_path)  # gone after its one use
    finally:
        for name in ("opgate_hook_pkg", "opgate_hook_pkg.part"):
            sys.modules.pop(name, None)


def test_a_module_already_imported_gets_the_hook_at_once() -> None:
    seen: list[str] = []
    after_import("json", lambda m: seen.append(m.__name__))
    assert seen == ["json"]


def test_a_module_that_does_not_exist_still_fails_to_import(monkeypatch: pytest.MonkeyPatch) -> None:
    after_import("opgate_no_such_module", lambda m: None)
    try:
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("opgate_no_such_module")
    finally:
        sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "_AfterImport"]


def test_the_sanitized_child_turns_cupys_pools_off_when_cupy_is_imported(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Not before: a child whose implementation never imports CuPy does not pay its import."""
    from opgate.verify import runtime

    fake = tmp_path / "cupy"
    (fake / "cuda").mkdir(parents=True)
    (fake / "__init__.py").write_text("from . import cuda\n")
    (fake / "cuda" / "__init__.py").write_text(
        "calls = []\n"
        "def set_allocator(a): calls.append(('device', a))\n"
        "def set_pinned_memory_allocator(a): calls.append(('pinned', a))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, value in runtime.SANITIZER_CHILD_ENV.items():
        monkeypatch.setenv(name, value)  # restored after the test: the call sets this process's environment
    saved = {name: sys.modules.pop(name) for name in ("cupy", "cupy.cuda") if name in sys.modules}
    try:
        runtime.disable_allocator_caches()
        assert "cupy" not in sys.modules
        cupy = importlib.import_module("cupy")
        assert cupy.cuda.calls == [("device", None), ("pinned", None)]
    finally:
        for name in ("cupy", "cupy.cuda"):
            sys.modules.pop(name, None)
        sys.modules.update(saved)
        sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "_AfterImport"]
