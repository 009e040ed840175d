"""The installed packages a spec imports are imported by the parent while the pre-flight child imports the spec
(engine/specload.installed_imports): only modules an installed distribution provides, never the user's own."""

from __future__ import annotations

from pathlib import Path

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
