"""benchmarks/oom_trials.py: bad arguments and a host without a GPU are one line and exit 2, before any work (the
benchmark itself fills a GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARK = REPO / "benchmarks" / "oom_trials.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, str(BENCHMARK), *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_no_checks_is_one_line_and_exit_2() -> None:
    done = _run("--checks", "0")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == "oom_trials.py: --checks must be at least 1 and --contexts at least 0"


def test_without_a_gpu_it_says_so_in_one_line() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the benchmark would run")
    done = _run()
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == "oom_trials.py: no CUDA GPU here: this benchmark fills a GPU's memory"
