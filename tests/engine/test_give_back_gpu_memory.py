"""After each check a warm worker gives back the GPU memory its allocator caches (engine/worker.py). Memory that stays
reserved with no tensor allocated is collected first: the private pool of a CUDA graph kept alive by a reference cycle
(one worker held 56 GiB so on an H100, forty-seventh session). torch stands in as a module with its CUDA calls."""

from __future__ import annotations

import gc
import sys
import types

import pytest

from opgate.engine import worker

GIB = 2**30


def fake_torch(reserved: list[int], calls: list[str], allocated: int) -> types.ModuleType:
    def empty_cache() -> None:
        calls.append("empty_cache")
        if "collect" in calls:  # what the collection freed can go back now
            reserved[0] = 0

    cuda = types.SimpleNamespace(is_initialized=lambda: True, memory_allocated=lambda: allocated,
                                 memory_reserved=lambda: reserved[0], empty_cache=empty_cache)
    torch = types.ModuleType("torch")
    torch.cuda = cuda
    torch._C = types.SimpleNamespace(_cuda_clearCublasWorkspaces=lambda: calls.append("workspaces"))
    return torch


@pytest.mark.parametrize(("held", "collected"), [(56 * GIB, True), (0, False)])
def test_memory_still_reserved_after_the_cache_is_given_back_is_collected_and_given_back(monkeypatch, held,
                                                                                        collected) -> None:
    calls: list[str] = []
    reserved = [held]
    monkeypatch.setitem(sys.modules, "torch", fake_torch(reserved, calls, allocated=0))
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append("collect") or 0)
    monkeypatch.setattr("opgate.gpu.thread_stack.shrink_thread_stack", lambda: None)
    gave = worker.give_back_gpu_memory()
    if collected:
        assert calls == ["workspaces", "empty_cache", "collect", "empty_cache"]
        assert gave == {"reserved_after_collect_mib": 0}
    else:  # nothing left reserved: no collection (it costs a fraction of a second in a process with torch)
        assert calls == ["workspaces", "empty_cache"] and gave == {}


def test_a_worker_whose_tensors_stay_alive_collects_once(monkeypatch) -> None:
    """A module-level cache of tensors (allocated, so reserved too) is collected once, before the cache goes back, not
    again after: a collection costs a fraction of a second in a process with torch, after every check."""
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "torch", fake_torch([2 * GIB], calls, allocated=2 * GIB))
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append("collect") or 0)
    monkeypatch.setattr("opgate.gpu.thread_stack.shrink_thread_stack", lambda: None)
    assert worker.give_back_gpu_memory() == {}
    assert calls == ["collect", "workspaces", "empty_cache"]


def test_a_check_after_which_the_allocator_fails_keeps_its_verdict_and_retires_its_worker(monkeypatch,
                                                                                          tmp_path) -> None:
    """A graph pool released twice leaves PyTorch's allocator raising from every empty_cache while the CUDA context
    still works (forty-ninth session: 44 runtime checks of one warm worker after it). The check that ran keeps its
    verdict and its result asks the worker to end (RETIRE_WORKER), which the worker and the runner both read."""
    import json

    from pathlib import Path

    from opgate.model.results import RETIRE_WORKER

    def broken_empty_cache() -> None:
        raise RuntimeError('it->second->use_count == 0 INTERNAL ASSERT FAILED at "CUDACachingAllocator.cpp":3473')

    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_initialized=lambda: True, synchronize=lambda: None,
                                       empty_cache=broken_empty_cache)
    monkeypatch.setitem(sys.modules, "torch", torch)
    for name in ("cupy", "cuda.bindings.runtime"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))  # tests/: the planted checks
    request = {"check_id": "planted.passing", "target": "planted_checks:PassingCheck",
               "result_path": str(tmp_path / "result.json"), "context": {"verb": "doctor"}}
    healthy, outcome = worker.run_request(request)
    result = json.loads((tmp_path / "result.json").read_text())
    assert not healthy and outcome.value == "passed" and result["outcome"] == "passed"
    assert "INTERNAL ASSERT FAILED" in result["extra"][RETIRE_WORKER]
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)  # a working allocator: nothing said, worker lives
    healthy, _ = worker.run_request(request)
    assert healthy and RETIRE_WORKER not in json.loads((tmp_path / "result.json").read_text())["extra"]
