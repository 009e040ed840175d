"""benchmarks/verify_library.py: which modes run, and bad arguments as one line and exit 2 before any work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARK = REPO / "benchmarks" / "verify_library.py"
sys.path.insert(0, str(REPO / "benchmarks"))

from verify_library import parse_modes  # noqa: E402


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, str(BENCHMARK), *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_modes_keep_the_benchmarks_order() -> None:
    assert parse_modes("one,naive") == ["naive", "one"]
    assert parse_modes("naive") == ["naive"]
    assert parse_modes("one, reused") == ["one", "reused"]


@pytest.mark.parametrize(("text", "said"), [("", "empty"), ("naive,fast", "unknown fast"),
                                            ("naive,again", "need 'one'")])
def test_bad_modes_say_what_is_wrong(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse_modes(text)


def test_bad_modes_are_one_line_and_exit_2(tmp_path: Path) -> None:
    done = _run(str(tmp_path), "--modes", "naive,fast")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == ("verify_library.py: --modes 'naive,fast': unknown fast; "
                                   "pick from naive,one,again,reused,edited")


def test_a_missing_folder_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = _run(str(tmp_path / "nowhere"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "not a folder" in done.stderr


def test_a_folder_without_specs_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = _run(str(tmp_path), "--modes", "naive")
    assert done.returncode == 2 and done.stderr.strip().endswith("no spec files in it")
