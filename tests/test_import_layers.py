"""`verify` and `analyze` share the core domain (`opgate.core`) and never import each other; `core` imports
neither. Checked on the source (every import statement, also inside functions) and by importing each alone."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "opgate"
FORBIDDEN = {"verify": ("opgate.analyze",), "analyze": ("opgate.verify",),
             "core": ("opgate.verify", "opgate.analyze")}


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_cross_imports(package: str) -> None:
    offending = [f"{path.relative_to(SRC)} imports {name}"
                 for path in sorted((SRC / package).rglob("*.py")) for name in _imports(path)
                 if name.startswith(FORBIDDEN[package])]
    assert not offending, offending


@pytest.mark.parametrize("package,modules", [
    ("opgate.verify", ("opgate.verify.engine", "opgate.verify.check", "opgate.verify.runtime")),
    ("opgate.analyze", ("opgate.analyze.run", "opgate.analyze.portability", "opgate.analyze.roofline")),
])
def test_each_imports_alone(package: str, modules: tuple[str, ...]) -> None:
    other = "opgate.analyze" if package == "opgate.verify" else "opgate.verify"
    code = (f"import sys\nfor m in {list(modules)!r}: __import__(m)\n"
            f"leaked = sorted(m for m in sys.modules if m == {other!r} or m.startswith({other + '.'!r}))\n"
            "print(leaked); raise SystemExit(1 if leaked else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(SRC.parent)}, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
