"""The recovery supervisor (tests/data/gpu/gpu_recovery.py) on CPU: it must notice a worker that reports a
sticky error, dies or hangs, replace it, and go on. The worker here is tests/data/recovery/protocol_worker.py
(same protocol as tests/data/gpu/gpu_recovery_worker.py, no GPU); the GPU trials themselves run in
scripts/gpu_check.sh."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from opgate_testing import data_module

gpu_recovery = data_module("gpu/gpu_recovery")
RecoveryReport, WorkerGone, WorkerProcess = gpu_recovery.RecoveryReport, gpu_recovery.WorkerGone, gpu_recovery.WorkerProcess
run_sticky_trials = gpu_recovery.run_sticky_trials

WORKER = [sys.executable, str(Path(__file__).resolve().parents[1] / "data" / "recovery" / "protocol_worker.py")]


@pytest.mark.parametrize(("fault", "detected_by", "old_exit"), [
    ("sticky", "worker reported a sticky error", 17),
    ("die", "worker died", 9),
])
def test_supervisor_replaces_a_poisoned_worker_and_goes_on(monkeypatch: pytest.MonkeyPatch, fault: str,
                                                           detected_by: str, old_exit: int) -> None:
    monkeypatch.setenv("PROTOCOL_WORKER_FAULT", fault)
    trials = run_sticky_trials(3, worker_command=WORKER)
    assert len(trials) == 3
    for trial in trials:
        assert trial.recovered and trial.detected_by == detected_by and trial.old_worker_exit == old_exit
        assert trial.recover_s > 0 and trial.new_worker_ready_s > 0
    report = RecoveryReport("passed", "", tuple(trials))
    assert report.summary()["sticky_success_rate"] == 1.0
    assert report.summary()["sticky_mean_recover_s"] > 0


def test_a_hung_worker_is_killed_and_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROTOCOL_WORKER_FAULT", "hang")
    (trial,) = run_sticky_trials(1, worker_command=WORKER, fault_timeout_s=1.0)
    assert trial.detected_by == "worker stopped answering" and trial.recovered
    assert trial.old_worker_exit is None  # it never exited by itself; the supervisor killed it


def test_a_worker_that_cannot_start_is_reported() -> None:
    with pytest.raises(WorkerGone, match="exited"):
        WorkerProcess([sys.executable, "-c", "import sys; sys.exit(4)"], start_timeout_s=30)
