"""Idle warm workers that hold a GPU's memory end before a GPU task starts short of it (engine/gpu_memory.py): on the
H100 host a library run's idle processes held 76 of 79 GiB when its runtime measurements began."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from opgate_testing import child_pythonpath

from opgate.checks.base import CheckContext
from opgate.engine.gpu_memory import CONTEXT_BYTES, GpuMemory, holders_to_end
from opgate.engine.runner import CheckTask, WarmPool, run_checks
from opgate.model.results import CheckResult, Outcome

GIB = 2**30


@pytest.fixture(autouse=True)
def planted_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", child_pythonpath())


def test_the_largest_holders_end_first_and_only_as_many_as_the_wanted_share_needs() -> None:
    memory = GpuMemory(free=4 * GIB, total=80 * GIB, used_by_pid={1: GIB, 2: 6 * GIB, 3: 5 * GIB, 9: 40 * GIB})
    # 20% of 80 GiB = 16 GiB wanted free: 12 short, so the 6 and 5 GiB holders and then the 1 GiB one
    assert holders_to_end(memory, [1, 2, 3], [1, 2, 3, 9], 0.2) == [2, 3, 1]
    assert holders_to_end(memory, [1, 2, 3], [1, 2, 3, 9], 0.1) == [2]  # 4 short: the 6 GiB holder covers it
    assert holders_to_end(GpuMemory(free=20 * GIB, total=80 * GIB), [1, 2], [1, 2], 0.2) == []  # enough free


def test_an_idle_worker_nvml_does_not_list_holds_nothing_there_unless_nvml_sees_none_of_the_run() -> None:
    listed = GpuMemory(free=GIB, total=80 * GIB, used_by_pid={5: 2 * GIB, 77: 70 * GIB})
    # NVML lists the run's busy worker 5: its pids compare, and idle 1 and 2 hold nothing on this GPU
    assert holders_to_end(listed, [1, 2], [1, 2, 5], 0.2) == []
    # NVML lists none of the run's pids (a container whose pids it does not see): each idle one holds a context
    unseen = GpuMemory(free=80 * GIB - 75 * GIB, total=80 * GIB, used_by_pid={1001: 75 * GIB})
    short = 0.2 * 80 * GIB - 5 * GIB
    assert len(holders_to_end(unseen, list(range(1, 40)), list(range(1, 40)), 0.2)) == -(-short // CONTEXT_BYTES)


def _task(name: str, key: str, exclusive: bool = False) -> CheckTask:
    return CheckTask(name, name, "planted_checks:PidCheck", 60.0, CheckContext(), worker=key, exclusive=exclusive)


def _idle_workers(pool: WarmPool, keys: tuple[str, ...]) -> dict[str, int]:
    """One idle warm worker of each key, by key: its pid."""
    for key in keys:
        run_checks([_task(f"warm {key}", key)], jobs=1, pool=pool)
    return {worker.key: worker.proc.pid for worker in pool.idle}


def test_make_gpu_room_ends_the_idle_holders_but_not_the_worker_the_task_will_get(tmp_path) -> None:
    pool = WarmPool(tmp_path, limit=8)
    try:
        pids = _idle_workers(pool, ("a", "b", "c"))
        # the measurement of key "a" wants half of an 80 GiB card: "b" and "c" hold 30 and 10 GiB, "a" 20 GiB
        reading = GpuMemory(free=5 * GIB, total=80 * GIB,
                            used_by_pid={pids["a"]: 20 * GIB, pids["b"]: 30 * GIB, pids["c"]: 10 * GIB})
        pool.make_gpu_room(_task("measure a", "a", exclusive=True), ("GPU-x",), read=lambda keys: reading)
        assert {worker.key for worker in pool.idle} == {"a"}  # b and c ended: 45 GiB free, short of 40 no more
        assert pool.events["ended idle to free GPU memory"] == 2
        assert pool.stats()["gpu_gib_freed"] == 40.0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(pids[k]) for k in ("b", "c")):
            time.sleep(0.1)
        assert not _alive(pids["b"]) and not _alive(pids["c"])
        # the next task of "a" still finds its warm worker
        (again,) = run_checks([_task("again a", "a")], jobs=1, pool=pool)
        assert again.outcome is Outcome.PASSED and again.extra["pid"] == pids["a"]
    finally:
        pool.close()


def test_a_measurement_run_again_alone_ends_every_idle_holder_but_its_own_worker(tmp_path) -> None:
    """Half the card free is enough for a measurement, not for one that ran out of memory beside the idle workers'
    contexts (CheckTask.gpu_alone, verify/resume.follow_up): then every idle holder ends, the task's worker kept."""
    import dataclasses

    pool = WarmPool(tmp_path, limit=8)
    try:
        pids = _idle_workers(pool, ("a", "b", "c"))
        reading = GpuMemory(free=60 * GIB, total=80 * GIB,
                            used_by_pid={pids["a"]: GIB, pids["b"]: GIB, pids["c"]: GIB})
        measurement = _task("measure a", "a", exclusive=True)
        pool.make_gpu_room(measurement, ("GPU-x",), read=lambda keys: reading)
        assert {worker.key for worker in pool.idle} == {"a", "b", "c"}  # 75% free: more than half, none ends
        pool.make_gpu_room(dataclasses.replace(measurement, gpu_alone=True), ("GPU-x",), read=lambda keys: reading)
        assert {worker.key for worker in pool.idle} == {"a"}
        assert pool.events["ended idle to free GPU memory"] == 2
        assert pool.events["measurements run again with their GPU emptied"] == 1
    finally:
        pool.close()


def test_a_side_by_side_task_reads_nvml_at_most_every_few_seconds(tmp_path) -> None:
    pool = WarmPool(tmp_path, limit=4)
    reads: list[int] = []

    def read(keys: object) -> GpuMemory:
        reads.append(1)
        return GpuMemory(free=40 * GIB, total=80 * GIB)

    try:
        run_checks([_task("warm", "a")], jobs=1, pool=pool)
        for _ in range(3):
            pool.make_gpu_room(_task("numerics", "b"), ("GPU-x",), read=read)
        pool.make_gpu_room(_task("measure", "b", exclusive=True), ("GPU-x",), read=read)  # a measurement: always
    finally:
        pool.close()
    assert len(reads) == 2


def _alive(pid: int) -> bool:
    from pathlib import Path

    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _run_one(pool: WarmPool, target: str, options: dict) -> tuple[CheckResult, Any]:
    """One GPU check of key "k" run in `pool`, and the idle warm worker that ran it."""
    task = CheckTask(target, target, f"planted_checks:{target}", 120.0, CheckContext(options=options), worker="k",
                     uses_gpu=True)
    (result,) = run_checks([task], jobs=1, pool=pool)
    [worker] = pool.idle
    return result, worker


def _gpu_bytes_of(pid: int) -> tuple[int, GpuMemory]:
    """NVML's usage of `pid` on the visible GPU, and the whole reading."""
    from opgate.engine.gpu_guard import keys_from_nvml
    from opgate.engine.gpu_memory import read_gpu_memory

    memory = read_gpu_memory(keys_from_nvml(None))
    assert memory is not None and memory.total > 0
    return memory.used_by_pid.get(pid, 0), memory


def _wait_for(path: Path, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not path.is_file():
        time.sleep(0.2)


@pytest.mark.gpu
def test_nvml_names_a_warm_worker_that_holds_gpu_memory_by_the_pid_the_pool_knows(tmp_path) -> None:
    """make_gpu_room finds the holders by pid: on a GPU host NVML must list a warm worker that allocated GPU memory
    under the pid the pool started it with (a container whose pids NVML does not see takes the fallback)."""
    pytest.importorskip("torch")
    from opgate.engine.gpu_guard import keys_from_nvml

    pool = WarmPool(tmp_path, limit=2)
    try:
        held, worker = _run_one(pool, "HoldsGpuMemoryCheck", {"mib": 1024})
        assert held.outcome is Outcome.PASSED, held.reason
        used, memory = _gpu_bytes_of(worker.proc.pid)
        assert used >= 1024 * 2**20, (worker.proc.pid, memory.used_by_pid)
        pool.make_gpu_room(CheckTask("m", "m", "planted_checks:PassingCheck", 60.0, CheckContext(), worker="other",
                                     exclusive=True, uses_gpu=True), keys_from_nvml(None),
                           read=lambda keys: GpuMemory(0, memory.total, memory.used_by_pid))
        assert not pool.idle and pool.stats()["gpu_gib_freed"] >= 1.0
    finally:
        pool.close()


@pytest.mark.gpu
def test_on_a_gpu_a_measurement_run_again_alone_ends_every_idle_holder_nvml_names(tmp_path) -> None:
    """CheckTask.gpu_alone on a real card: idle workers holding 256 MiB each leave far more than half of it free, so a
    measurement ends none of them; the same measurement run again alone ends every one but its own worker's."""
    import dataclasses

    pytest.importorskip("torch")
    from opgate.engine.gpu_guard import keys_from_nvml

    pool = WarmPool(tmp_path, limit=4)
    try:
        for key in ("a", "b", "c"):
            task = CheckTask(f"hold {key}", f"hold {key}", "planted_checks:HoldsGpuMemoryCheck", 120.0,
                             CheckContext(options={"mib": 256}), worker=key, uses_gpu=True)
            (held,) = run_checks([task], jobs=1, pool=pool)
            assert held.outcome is Outcome.PASSED, held.reason
        measurement = CheckTask("m", "m", "planted_checks:PassingCheck", 60.0, CheckContext(), worker="a",
                                exclusive=True, uses_gpu=True)
        keys = keys_from_nvml(None)
        pool.make_gpu_room(measurement, keys)
        assert {worker.key for worker in pool.idle} == {"a", "b", "c"}
        pool.make_gpu_room(dataclasses.replace(measurement, gpu_alone=True), keys)
        assert {worker.key for worker in pool.idle} == {"a"}
        assert pool.events["measurements run again with their GPU emptied"] == 1
        assert pool.stats()["gpu_gib_freed"] >= 0.5
    finally:
        pool.close()


@pytest.mark.gpu
def test_a_warm_worker_gives_back_what_cupys_pool_kept_after_its_check(tmp_path) -> None:
    """A check through CuPy (a CUDA C implementation) leaves its blocks in CuPy's default pool; the idle worker must
    not hold them on the card (torch's cache is emptied the same way)."""
    pytest.importorskip("cupy")
    pool = WarmPool(tmp_path, limit=1)
    try:
        result, worker = _run_one(pool, "CupyPoolCheck", {"mib": 2048})
        assert result.outcome is Outcome.PASSED and "2048 MiB" in result.reason, result.reason
        used, memory = _gpu_bytes_of(worker.proc.pid)
        assert used < 1024 * 2**20, memory.used_by_pid
    finally:
        pool.close()


@pytest.mark.gpu
def test_a_warm_worker_gives_back_the_local_memory_a_spilling_kernel_grew(tmp_path, monkeypatch) -> None:
    """A kernel with 16 KiB of local memory a thread grows the context's stack for every thread the GPU holds
    (GiBs on an H100 or H200) and the driver never shrinks it: the idle worker sets it back, and the memory log
    says from what."""
    pytest.importorskip("cupy")
    import json

    from opgate.engine.worker import MEMORY_LOG_ENV

    log = tmp_path / "held.jsonl"
    monkeypatch.setenv(MEMORY_LOG_ENV, str(log))
    (tmp_path / "w").mkdir()
    pool = WarmPool(tmp_path / "w", limit=1)
    try:
        result, worker = _run_one(pool, "LocalMemoryCheck", {"kib": 16})
        assert result.outcome is Outcome.PASSED, result.reason
        _wait_for(log)
        used, memory = _gpu_bytes_of(worker.proc.pid)
        assert used < 1536 * 2**20, memory.used_by_pid
    finally:
        pool.close()
    [entry] = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry["stack_bytes_per_thread"][0] >= 16 * 1024 and entry["stack_bytes_per_thread"][1] <= 1024, entry


@pytest.mark.gpu
def test_a_worker_asked_to_log_what_it_holds_names_the_live_tensor_and_its_referrer(tmp_path, monkeypatch) -> None:
    """OPGATE_WORKER_MEMORY_LOG: after each check the worker appends what it still holds on the GPU, with its
    largest live CUDA tensors and what refers to them (how the idle workers' 2-8 GiB are to be found)."""
    pytest.importorskip("torch")
    import json

    from opgate.engine.worker import MEMORY_LOG_ENV

    log = tmp_path / "held.jsonl"
    monkeypatch.setenv(MEMORY_LOG_ENV, str(log))
    pool = WarmPool(tmp_path / "w", limit=1)
    (tmp_path / "w").mkdir()
    try:
        held, _ = _run_one(pool, "HoldsGpuMemoryCheck", {"mib": 512})
        assert held.outcome is Outcome.PASSED, held.reason
        _wait_for(log)
    finally:
        pool.close()
    [entry] = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry["check"] == "HoldsGpuMemoryCheck" and entry["allocated_mib"] >= 512
    assert entry["tensors"][0]["mib"] == 512 and "list" in entry["tensors"][0]["referrers"]
