"""Per-GPU fan-out of device-local doctor probes (opgate.doctor.fanout): the tasks it builds, the merge, and real
child processes running side by side, each with its own CUDA_VISIBLE_DEVICES (a planted check reports what it saw)."""

from __future__ import annotations

import pytest
from opgate_testing import child_pythonpath

from opgate.checks.base import CheckContext
from opgate.doctor import gpu_checks
from opgate.doctor.fanout import FANOUT_GPU_ENV, fanout_tasks, merge_per_gpu, run_per_gpu, visible_device_ids
from opgate.model.results import CheckResult, Figure, Outcome

CTX = CheckContext(level="standard")


def test_visible_ids_follow_the_parents_own_list() -> None:
    assert visible_device_ids(3, None) == ["0", "1", "2"]
    assert visible_device_ids(2, "4, 6") == ["4", "6"]
    assert visible_device_ids(2, "GPU-aaa,GPU-bbb,GPU-ccc") == ["GPU-aaa", "GPU-bbb"]
    assert visible_device_ids(3, "5") == ["0", "1", "2"]  # shorter than the count NVML gave: indices


def test_tasks_run_side_by_side_each_on_one_gpu() -> None:
    tasks = fanout_tasks("doctor.launch_latency", "launch", "m:C", 60.0, CTX, [0, 1, 2], {"CUDA_VISIBLE_DEVICES": "3,5,7"})
    assert [t.check_id for t in tasks] == ["doctor.launch_latency@GPU0", "doctor.launch_latency@GPU1",
                                           "doctor.launch_latency@GPU2"]
    assert [t.env["CUDA_VISIBLE_DEVICES"] for t in tasks] == ["3", "5", "7"]
    assert [t.env[FANOUT_GPU_ENV] for t in tasks] == ["0", "1", "2"]
    assert not any(t.exclusive for t in tasks)


def test_merge_prefixes_figures_and_keeps_the_worst() -> None:
    a = CheckResult("x", "x", Outcome.PASSED, "fast", (Figure("eager launch", 5.1, "us"),))
    b = CheckResult("x", "x", Outcome.WARNED, "slow", (Figure("eager launch", 12.0, "us"),), remediation="look")
    merged = merge_per_gpu("doctor.launch_latency", "launch", [(0, a), (1, b)])
    assert merged.outcome == Outcome.WARNED
    assert [f.name for f in merged.figures] == ["GPU0 eager launch", "GPU1 eager launch"]
    assert merged.reason == "GPU0: fast; GPU1: slow" and merged.remediation == "look"
    assert [p["gpu"] for p in merged.extra["per_gpu"]] == [0, 1]


def test_which_probes_fan_out() -> None:
    local = {c.check_id for c in gpu_checks.STANDARD_CHECKS if c.device_local}
    assert local == {"doctor.launch_latency", "doctor.stream_priority", "doctor.event_timing"}
    # link-sharing probes stay serial in one process
    assert not gpu_checks.HostLinksCheck.device_local and not gpu_checks.P2PCheck.device_local


def test_real_children_overlap_and_each_sees_its_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", child_pythonpath())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3,5")
    merged = run_per_gpu("planted.device_env", "env", "planted_checks:DeviceEnvCheck", 60.0, CTX, [0, 1, 2])
    assert merged.outcome == Outcome.PASSED, merged.reason
    figures = {f.name: f.value for f in merged.figures}
    assert [figures[f"GPU{d} CUDA_VISIBLE_DEVICES"] for d in range(3)] == ["2", "3", "5"]
    runs = [p["extra"] for p in merged.extra["per_gpu"]]
    assert [r["fanout_gpu"] for r in runs] == ["0", "1", "2"]
    # side by side: every child started before every other one ended
    assert max(r["start"] for r in runs) < min(r["end"] for r in runs)
