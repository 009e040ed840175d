"""Assignment of verify's GPU stage tasks to the GPUs of a multi-GPU host (opgate.verify.gpu_fanout, pure)."""

from __future__ import annotations

import pytest

from opgate.verify.gpu_fanout import GpuStageTask, assign_gpu_stage_tasks

TASKS = [
    GpuStageTask("softmax.triton.float32.runtime", "runtime", 60.0),
    GpuStageTask("softmax.triton.float16.runtime", "runtime", 60.0),
    GpuStageTask("softmax.triton.sanitizer", "sanitizer", 200.0),
    GpuStageTask("softmax.triton.racecheck", "racecheck", 150.0),
    GpuStageTask("softmax.triton.ncu", "ncu", 120.0),
    GpuStageTask("softmax.triton.recovery", "recovery", 90.0),
    GpuStageTask("softmax.triton.hostcopy", "host_transfer", 30.0),  # a stage that shares the host link
]


def test_one_gpu_runs_everything_in_order() -> None:
    plan = assign_gpu_stage_tasks(TASKS, [0])
    assert plan.queues[0] == tuple(t.task_id for t in TASKS[:-1])
    assert plan.serial == (("softmax.triton.hostcopy", 0),)
    assert plan.estimate_s == pytest.approx(sum(t.estimate_s for t in TASKS))


def test_four_gpus_balance_longest_first_and_keep_engine_order_per_gpu() -> None:
    plan = assign_gpu_stage_tasks(TASKS, [0, 1, 2, 3], visible_ids=["4", "5", "6", "7"])
    # LPT: sanitizer 200 -> GPU0, racecheck 150 -> GPU1, ncu 120 -> GPU2, recovery 90 -> GPU3,
    # runtime 60 -> GPU3 (150), runtime 60 -> GPU2 (180)
    assert plan.queues[0] == ("softmax.triton.sanitizer",)
    assert plan.queues[1] == ("softmax.triton.racecheck",)
    assert plan.queues[2] == ("softmax.triton.float16.runtime", "softmax.triton.ncu")
    assert plan.queues[3] == ("softmax.triton.float32.runtime", "softmax.triton.recovery")
    assert plan.estimate_s == pytest.approx(200.0 + 30.0)
    assert plan.env["softmax.triton.ncu"] == {"CUDA_VISIBLE_DEVICES": "6"}
    assert plan.device_of("softmax.triton.hostcopy") == 0
    every = [t for q in plan.queues.values() for t in q] + [t for t, _ in plan.serial]
    assert sorted(every) == sorted(t.task_id for t in TASKS)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="no GPU"):
        assign_gpu_stage_tasks(TASKS, [])
    with pytest.raises(ValueError, match="twice"):
        assign_gpu_stage_tasks(TASKS + TASKS[:1], [0, 1])
