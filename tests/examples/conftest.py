"""Run the interpreter worker (interpreter_cases.py) in a child process and hand its records to the tests.

The child gets TRITON_INTERPRET=1 (=0 for the ahead-of-time compile mode) before it imports triton; this pytest process never imports triton for these
tests, so they cannot be spoiled by (or spoil) another test's Triton mode.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKER = HERE / "interpreter_cases.py"
WORKER_TIMEOUT_S = 900

sys.path.insert(0, str(HERE))


# What the worker inherits from this process's environment: where things are, not what earlier tests in this
# process set. (The float32 GELU that once measured 1.2e-4 in a full run was not the environment: torch's oneMKL
# raced on the process's first erf, pytorch/pytorch#188792; src/opgate/engine/vml_dispatch.py resolves it.)
INHERITED_ENV = ("PATH", "HOME", "TMPDIR", "LANG", "USER", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME",
                 "CUDA_PATH", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH", "TRITON_CACHE_DIR", "OPGATE_CACHE_DIR")


def run_worker(mode: str) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k in INHERITED_ENV or k.startswith("LC_")}
    env["TRITON_INTERPRET"] = "0" if mode in ("compile", "examples-gpu") else "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, str(WORKER), mode], capture_output=True, text=True, env=env, timeout=WORKER_TIMEOUT_S
    )
    if proc.returncode != 0:
        pytest.fail(f"interpreter worker `{mode}` exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


@pytest.fixture(scope="session")
def worker() -> Callable[..., list[dict[str, Any]]]:
    """run(mode) -> records, each mode run at most once per session."""
    cache: dict[str, list[dict[str, Any]]] = {}

    def run(mode: str, fresh: bool = False) -> list[dict[str, Any]]:
        if fresh or mode not in cache:
            cache[mode] = run_worker(mode)
        return cache[mode]

    return run
