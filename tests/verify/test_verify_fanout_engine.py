"""verify's per-GPU fan-out in the engine and the runner: on 2+ GPUs each GPU stage task is pinned to one GPU
(CUDA_VISIBLE_DEVICES, its own warm-worker pool), exclusive means alone on that GPU, and one GPU changes nothing."""

from __future__ import annotations

import time

import pytest
from opgate_testing import child_pythonpath

from opgate.checks.base import CheckContext
from opgate.engine.runner import CheckTask, run_checks
from opgate.verify.engine import fan_out_gpu_stages

STAGES = {"runtime", "sanitizer", "recovery"}


def _tasks() -> list[CheckTask]:
    def t(check_id: str, exclusive: bool = False) -> CheckTask:
        return CheckTask(check_id, check_id, "x:Y", 60.0, CheckContext(), env={"OMP_NUM_THREADS": "1"},
                         exclusive=exclusive, worker="verify:k")
    return [t("verify.op.a.float32.runtime", True), t("verify.op.a.float16.runtime", True),
            t("verify.op.b.float32.runtime", True), t("verify.op.b.float16.runtime", True),
            t("verify.op.a.float32"), t("verify.op.b.float32"),
            t("verify.op.a.sanitizer"), t("verify.op.a.racecheck"), t("verify.op.a.recovery", True)]


def test_one_gpu_changes_nothing() -> None:
    tasks = _tasks()
    assert fan_out_gpu_stages(tasks, STAGES, 1, ["0"]) == tasks


def test_two_gpus_pin_every_gpu_stage_task_and_keep_the_stage_order() -> None:
    out = fan_out_gpu_stages(_tasks(), STAGES, 2, ["3", "5"])
    ids = [t.check_id for t in out]
    assert ids.index("verify.op.b.float16.runtime") < ids.index("verify.op.a.float32")  # runtime phase first
    assert ids.index("verify.op.a.recovery") > ids.index("verify.op.a.racecheck")
    runtime = [t for t in out if t.check_id.endswith(".runtime")]
    assert {t.device for t in runtime} == {0, 1}
    assert {t.env["CUDA_VISIBLE_DEVICES"] for t in runtime} == {"3", "5"}  # the parent's visible ids
    assert runtime[0].device != runtime[1].device  # interleaved: the first two start side by side
    for task in out:
        if task.device is not None:
            assert task.worker == f"verify:k:gpu{task.device}" and task.env["OMP_NUM_THREADS"] == "1"
    numerics = [t for t in out if t.check_id.endswith("float32") and not t.check_id.endswith("runtime")]
    assert all(t.device is None for t in numerics)


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", child_pythonpath())


def _sleeping(check_id: str, device: int | None, exclusive: bool = True) -> CheckTask:
    return CheckTask(check_id, check_id, "planted_checks:PidCheck", 60.0, CheckContext(), exclusive=exclusive,
                     device=device)


def test_exclusive_is_per_gpu_in_the_runner(planted: None) -> None:
    started: dict[str, float] = {}
    ended: dict[str, float] = {}
    t0 = time.perf_counter()
    run_checks([_sleeping("d0a", 0), _sleeping("d1a", 1), _sleeping("d0b", 0), _sleeping("any", None)], jobs=4,
               on_start=lambda task: started.setdefault(task.check_id, time.perf_counter() - t0),
               on_done=lambda task, result: ended.setdefault(task.check_id, time.perf_counter() - t0))
    assert started["d1a"] < ended["d0a"]  # two GPUs, side by side
    assert started["d0b"] >= ended["d0a"]  # one GPU, one at a time
    assert started["any"] >= max(ended["d0b"], ended["d1a"])  # unpinned and exclusive: alone on every GPU


def test_spare_worker_count_follows_jobs_unless_the_environment_sets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from opgate.verify.engine import SPARE_WORKERS_ENV, SPARE_WORKERS_MAX, spare_worker_count

    monkeypatch.delenv(SPARE_WORKERS_ENV, raising=False)
    assert spare_worker_count(3) == 3
    assert spare_worker_count(64) == SPARE_WORKERS_MAX
    monkeypatch.setenv(SPARE_WORKERS_ENV, "0")  # none: what the spares cost, measured by their absence
    assert spare_worker_count(16) == 0
    monkeypatch.setenv(SPARE_WORKERS_ENV, "four")  # not a count: the default
    assert spare_worker_count(16) == SPARE_WORKERS_MAX
