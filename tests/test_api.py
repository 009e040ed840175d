"""opgate.api, the one documented extension surface: what it lists is there, and the plugin code a third party
writes (the planted plugins the tests register, the examples in the docs) imports opgate.api and nothing deeper."""

from __future__ import annotations

import ast
import re

import pytest

import opgate.api
from opgate_testing import REPO

THIRD_PARTY = (REPO / "tests" / "data" / "verify" / "plugins" / "planted_verify_plugins.py",)
PLUGIN_DOCS = (REPO / "docs" / "verify-engine.md", REPO / "docs" / "architecture.md", REPO / "README.md")


def opgate_imports(source: str) -> list[str]:
    """The opgate modules a piece of Python source imports (`import opgate` itself, for the spec API, is fine)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("opgate"):
            found.append(node.module or "")
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith("opgate.")]
    return found


@pytest.mark.parametrize("name", opgate.api.__all__)
def test_every_listed_name_is_there(name: str) -> None:
    assert getattr(opgate.api, name) is not None


def test_the_api_has_a_version() -> None:
    assert isinstance(opgate.api.API_VERSION, int) and opgate.api.API_VERSION >= 1


@pytest.mark.parametrize("path", THIRD_PARTY, ids=lambda p: p.name)
def test_a_third_party_plugin_imports_only_the_api(path) -> None:  # type: ignore[no-untyped-def]
    assert set(opgate_imports(path.read_text())) <= {"opgate", "opgate.api"}


@pytest.mark.parametrize("path", PLUGIN_DOCS, ids=lambda p: p.name)
def test_the_docs_show_plugins_importing_the_api(path) -> None:  # type: ignore[no-untyped-def]
    """Every `from opgate... import` in a doc's Python block names opgate.api (or the spec API, `opgate`)."""
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
    imported = [module for block in blocks for module in opgate_imports(block)]
    assert set(imported) <= {"opgate", "opgate.api"}, imported
