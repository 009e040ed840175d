"""engine/bytecode.py: a run's children share compiled bytecode in opgate's folder only where Python would not cache
it itself, and everything is as before once the run ends."""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from opgate.engine import bytecode


@pytest.fixture
def fresh_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module with no bytecode anywhere, importable by name, probed as the children's first import."""
    package = tmp_path / "site"
    package.mkdir()
    source = package / "opgate_bytecode_probe.py"
    source.write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(package))
    monkeypatch.setattr(bytecode, "PROBED_MODULES", ("opgate_bytecode_probe",))
    monkeypatch.delenv(bytecode.PREFIX_ENV, raising=False)
    monkeypatch.delenv(bytecode.OPT_OUT_ENV, raising=False)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    return source


def test_children_compile_only_without_bytecode_and_without_writes(fresh_module: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert bytecode.children_would_compile([fresh_module])
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.delenv(bytecode.DONT_WRITE_ENV, raising=False)
    assert not bytecode.children_would_compile([fresh_module])  # Python writes __pycache__ itself
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    py_compile.compile(str(fresh_module))  # shipped bytecode: read even when writing is off
    assert not bytecode.children_would_compile([fresh_module])


def test_a_child_writes_its_bytecode_in_the_shared_folder(fresh_module: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(bytecode.DONT_WRITE_ENV, "1")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    folder = tmp_path / "cache" / bytecode.FOLDER
    with bytecode.shared_bytecode(folder) as decided:
        assert decided == f"shared in {folder}"
        assert os.environ[bytecode.PREFIX_ENV] == str(folder) and bytecode.DONT_WRITE_ENV not in os.environ
        subprocess.run([sys.executable, "-c", "import opgate_bytecode_probe"], check=True, env=dict(os.environ),
                       cwd=fresh_module.parent)
    written = list(folder.rglob("opgate_bytecode_probe*.pyc"))
    assert len(written) == 1, list(folder.rglob("*"))
    assert not (fresh_module.parent / "__pycache__").exists()  # nothing in the installed tree
    assert os.environ[bytecode.DONT_WRITE_ENV] == "1" and bytecode.PREFIX_ENV not in os.environ
    assert sys.dont_write_bytecode and sys.pycache_prefix is None


def test_nothing_changes_where_python_caches_or_when_asked(fresh_module: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setenv(bytecode.OPT_OUT_ENV, "0")
    with bytecode.shared_bytecode(tmp_path / "a") as decided:
        assert decided.startswith("left as it is") and bytecode.PREFIX_ENV not in os.environ
    monkeypatch.delenv(bytecode.OPT_OUT_ENV)
    py_compile.compile(str(fresh_module))
    with bytecode.shared_bytecode(tmp_path / "b") as decided:
        assert decided == "Python's own" and bytecode.PREFIX_ENV not in os.environ
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_run_keeps_its_bytecode_in_the_cache_folder_also_with_no_cache(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """--no-cache judges everything again; bytecode judges nothing, so it stays where the next run finds it (on the
    H100 host every --no-cache run compiled torch from source in each of its processes). A cache folder that cannot
    be made (under a file here) leaves it in the run's own folder."""
    from opgate.verify.engine import _bytecode_folder

    monkeypatch.setenv("OPGATE_CACHE", "0")
    monkeypatch.setenv("OPGATE_CACHE_DIR", str(tmp_path / "cache"))
    assert _bytecode_folder(tmp_path / "run") == tmp_path / "cache" / bytecode.FOLDER
    assert not (tmp_path / "cache").exists()  # made only when a run shares bytecode there
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("OPGATE_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    assert _bytecode_folder(tmp_path / "run") == tmp_path / "run" / bytecode.FOLDER
