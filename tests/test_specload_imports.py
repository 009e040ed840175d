"""The installed packages a spec imports are imported by the parent while the pre-flight child imports the spec
(engine/specload.installed_imports): only modules an installed distribution provides, never the user's own."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest

from opgate.engine.specload import installed_imports


def test_only_installed_packages_are_imported_ahead(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text("X = 1\n")
    spec = tmp_path / "spec.py"
    spec.write_text("import json\nimport pytest\nfrom pytest import approx\nimport helpers\nfrom . import sibling\n"
                    "from _pytest.python_api import approx as a2\n\ndef f():\n    import numpy\n")
    # pytest and _pytest come from site-packages; json is the standard library, helpers the user's, the relative
    # import and the one inside a function are not the file's top level
    assert installed_imports([spec]) == ["pytest", "_pytest.python_api"]


def test_a_file_that_does_not_parse_gives_none(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\ndef (:\n")
    assert installed_imports([broken, tmp_path / "missing.py"]) == []


def _distribution(site: Path, module: str) -> None:
    """A package `module` with its .dist-info in `site`, as `pip install --target site` leaves it."""
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text("")
    info = site / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    (info / "top_level.txt").write_text(f"{module}\n")


def test_a_distribution_installed_with_pip_target_counts_but_not_a_module_beside_the_specs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip install --target DIR with DIR on PYTHONPATH is neither site-packages nor dist-packages (the GPU library
    runs' wheels in /tmp/site were imported twice in a row); a module beside the specs stays the user's even where a
    distribution of that name is installed."""
    site, specs = tmp_path / "site", tmp_path / "specs"
    _distribution(site, "vendored_lib")
    _distribution(site, "shadowed_lib")
    (specs / "shadowed_lib").mkdir(parents=True)
    (specs / "shadowed_lib" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(specs))  # the user's folder first, as when the specs run from it
    importlib.invalidate_caches()
    spec = specs / "spec.py"
    spec.write_text("import vendored_lib\nimport shadowed_lib\n")
    assert installed_imports([spec]) == ["vendored_lib"]
    # the same where the specs' folder is not on sys.path: the spec may put it there itself at import
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    assert importlib.util.find_spec("shadowed_lib").origin.startswith(str(site))
    assert installed_imports([spec]) == ["vendored_lib"]
