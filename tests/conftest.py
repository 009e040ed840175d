from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ok, reason = gpu_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"GPU test: {reason}")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # the marker, not a keyword: tests/gpu/ holds CPU tests too
            item.add_marker(skip)


@pytest.fixture
def opgate_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = child_pythonpath()
    return env


def run_opgate(args: list[str], env: dict[str, str] | None = None, timeout: float = 300):
    import subprocess

    env = dict(env or os.environ)
    env.setdefault("PYTHONPATH", child_pythonpath())
    return subprocess.run([sys.executable, "-m", "opgate", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=REPO)
