"""Children die with opgate, and only then: opgate as PID 1 (a container's entrypoint) keeps its children."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")

# Starts one child with die_with_parent as its preexec_fn, as the runner does, and prints the child's exit code.
PARENT = """
import subprocess, sys
from opgate.engine.children import die_with_parent
import os
child = subprocess.run([sys.executable, "-c", "print('child ran')"], preexec_fn=die_with_parent,
                       capture_output=True, text=True, timeout=60)
print(f"parent pid {os.getpid()}; child exit {child.returncode}; {child.stdout.strip()}")
"""


def test_a_child_of_a_normal_parent_runs(opgate_env):
    proc = subprocess.run([sys.executable, "-c", PARENT], capture_output=True, text=True, timeout=60, env=opgate_env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "child exit 0; child ran" in proc.stdout


def test_a_child_of_opgate_as_pid_1_runs(opgate_env):
    """`ENTRYPOINT ["opgate"]` makes opgate PID 1; every check's child once took that for a dead parent and exited 1
    (all ten basic checks 'exited with code 1 before reporting a result' in deploy/image's container)."""
    unshare = shutil.which("unshare")
    if not unshare:
        pytest.skip("no unshare(1) here to make a PID namespace")
    probe = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True,
                           timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a PID namespace here (unshare: {probe.stderr.strip()[:200]})")
    proc = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", sys.executable, "-c", PARENT],
                          capture_output=True, text=True, timeout=60, env=opgate_env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "parent pid 1; child exit 0; child ran" in proc.stdout


def test_a_process_whose_parent_is_not_the_one_named_ends_at_once(opgate_env):
    """The re-parented case: the pid the process was told is not its parent any more, so it exits 1."""
    code = "from opgate.engine.children import die_with_parent; die_with_parent(parent_pid=-1); print('survived')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=opgate_env)
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", "")


def test_a_process_that_names_its_real_parent_runs_on(opgate_env):
    code = ("import os; from opgate.engine.children import die_with_parent; die_with_parent(parent_pid=os.getppid()); "
            "print('survived')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=opgate_env)
    assert (proc.returncode, proc.stdout.strip()) == (0, "survived"), proc.stderr[-2000:]


def test_the_interrupt_path_reaps_against_one_deadline_not_one_per_reaper() -> None:
    """Every reaper after the first kill_all_children waits only what is left of INTERRUPT_REAP_S: three reapers of
    2 s each outlasted `timeout -k 5` on the H200 host."""
    import time

    from opgate.engine import children

    try:
        assert children.reap_seconds_left(10.0) == 10.0  # not stopping: the caller's own wait
        children.kill_all_children()
        first = children.reap_seconds_left(10.0)
        assert 0.0 < first <= children.INTERRUPT_REAP_S
        time.sleep(0.2)
        children.kill_all_children()  # a second call keeps the first deadline
        assert children.reap_seconds_left(10.0) <= first - 0.15
    finally:
        children.start_afresh()
    assert not children.STOPPING.is_set() and children.reap_seconds_left(10.0) == 10.0
