"""benchmarks/graph_replay_timing.py: bad input and a host without a GPU are one line and exit 2, before any work
(the benchmark itself times GPU calls)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "graph_replay_timing.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCHMARK), *args], capture_output=True, text=True, timeout=120)


def test_a_spec_file_that_does_not_exist_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = _run(str(tmp_path / "missing.py"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == f"graph_replay_timing.py: {tmp_path / 'missing.py'}: no such spec file"


def test_without_a_gpu_it_says_so_in_one_line(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the benchmark would run")
    spec = tmp_path / "spec.py"
    spec.write_text("")
    done = _run(str(spec))
    assert done.returncode == 2
    assert done.stderr.strip() == "graph_replay_timing.py: no CUDA device: this benchmark times GPU calls"
