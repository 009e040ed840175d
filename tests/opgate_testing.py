"""Shared helpers for opgate's tests (a module of its own: `conftest` names clash across folders)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
TESTS = REPO / "tests"
DATA = TESTS / "data"


def child_pythonpath() -> str:
    """PYTHONPATH for child processes: this checkout's opgate plus the tests' planted checks."""
    return os.pathsep.join([str(SRC), str(TESTS), os.environ.get("PYTHONPATH", "")])


def gpu_available() -> tuple[bool, str]:
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except Exception as exc:  # no driver here: the reason is shown in the skip
        return False, f"no NVIDIA GPU/driver ({type(exc).__name__}: {exc})"
    return (count > 0, "NVML sees no GPU") if count == 0 else (True, "")


def run_opgate(args: list[str], env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(env or os.environ)
    env.setdefault("PYTHONPATH", child_pythonpath())
    return subprocess.run([sys.executable, "-m", "opgate", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=REPO)
