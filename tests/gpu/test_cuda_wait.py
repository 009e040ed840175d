"""A verify child on a GPU waits for the GPU asleep (opgate/gpu/cuda_wait.py): the CPU side here, the flag on the
primary context on a GPU host. What it saves is in benchmarks/cuda_wait.py, not timed here."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from opgate.gpu import cuda_wait
from opgate.verify.engine import child_env
from opgate_testing import child_pythonpath


def test_gpu_runs_ask_their_children_to_wait_asleep_and_cpu_runs_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cuda_wait.ENV, raising=False)
    assert child_env({}, 4, gpu=True)[cuda_wait.ENV] == "block"
    assert cuda_wait.ENV not in child_env({}, 4, gpu=False)
    monkeypatch.setenv(cuda_wait.ENV, "spin")  # the user's word wins
    assert child_env({}, 4, gpu=True)[cuda_wait.ENV] == "spin"


def test_without_a_driver_it_says_why_and_raises_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cuda_wait.ENV, "spin")
    assert cuda_wait.apply_from_environment() == "not asked"
    monkeypatch.setenv(cuda_wait.ENV, "block")
    reason = cuda_wait.apply_from_environment()
    assert isinstance(reason, str)  # "" on a GPU host, the missing driver elsewhere


CHILD = """
import sys
from opgate.gpu import cuda_wait
before = cuda_wait.primary_context_schedule()
reason = cuda_wait.apply_from_environment()
import torch
torch.ones(1, device="cuda").sum().item()  # the primary context is now active, with the flags set before
from cuda.bindings import driver
err, flags = driver.cuCtxGetFlags()
print(before, int(flags) & cuda_wait.CU_CTX_SCHED_MASK, reason or "set")
"""


@pytest.mark.gpu
@pytest.mark.parametrize("wanted, schedule", [("block", cuda_wait.CU_CTX_SCHED_BLOCKING_SYNC),
                                              ("yield", cuda_wait.CU_CTX_SCHED_YIELD), ("spin", 0)])
def test_the_context_torch_uses_has_the_schedule_asked_for(wanted: str, schedule: int) -> None:
    env = {**os.environ, "PYTHONPATH": child_pythonpath(), cuda_wait.ENV: wanted}
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    _before, got, _reason = done.stdout.split(maxsplit=2)
    assert int(got) == schedule, done.stdout
