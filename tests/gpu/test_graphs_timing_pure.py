from __future__ import annotations

import pytest

from opgate.gpu.probes.graphs import classify_capture_error
from opgate.gpu.probes.timing import percentile


def test_percentile() -> None:
    assert percentile([1.0], 95) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert percentile([0.0, 10.0], 95) == pytest.approx(9.5)


@pytest.mark.parametrize(("message", "points", "expected"), [
    ("CUDA error: operation not permitted when stream is capturing", [
        "called a synchronizing CUDA operation at /spec.py:12: scale = x.abs().max().item()"], "host read"),
    ("CUDA error: operation not permitted when stream is capturing",
     ["torch.cuda.synchronize() at /spec.py:20: torch.cuda.synchronize()"], "synchronization"),
    ("CUDA error: operation not permitted when stream is capturing", [], "synchronizes with the host"),
    ("operation would make the legacy stream depend on a capturing blocking stream", [], "legacy default stream"),
    ("x", ["called a synchronizing CUDA operation (aten::nonzero) at /spec.py:3"], "depend on the data"),
])
def test_capture_failures_are_explained_in_user_terms(message, points, expected) -> None:
    cause, remedy = classify_capture_error(message, points)
    assert expected in cause
    assert remedy


def test_capture_and_replay_runs_capture_replays_then_the_check() -> None:
    """The one capture sequence (cuda-bindings, CuPy and torch callers pass their calls in), driven by plain
    Python callables: the order of the steps and how a capture error and a wrong replay are reported."""
    from opgate.gpu.probes.graphs import capture_and_replay

    steps: list[str] = []
    replayed = capture_and_replay(lambda: steps.append("capture") or "graph", lambda g: steps.append(f"replay {g}"),
                                  lambda: steps.append("check") or "", replays=2)
    assert steps == ["capture", "replay graph", "replay graph", "check"]
    assert replayed.captured and replayed.graph == "graph" and replayed.replays == 2 and not replayed.problem
    assert replayed.capture_ms >= 0

    def refuse() -> str:
        raise RuntimeError("operation not permitted when stream is capturing\nsecond line")

    failed = capture_and_replay(refuse, lambda g: steps.append("never"), lambda: "never")
    assert not failed.captured and failed.error == "operation not permitted when stream is capturing"
    assert failed.replays == 0 and "never" not in steps
    wrong = capture_and_replay(lambda: 1, lambda g: None, lambda: "the replay differs")
    assert wrong.captured and wrong.problem == "the replay differs"


def test_an_exception_that_is_no_finding_passes_through_the_capture() -> None:
    """Running out of memory while capturing says nothing about capturability: the caller decides what it means."""
    from opgate.gpu.probes.graphs import capture_and_replay

    def out_of_memory() -> str:
        raise MemoryError("out of memory while capturing")

    with pytest.raises(MemoryError):
        capture_and_replay(out_of_memory, lambda g: None, lambda: "", not_findings=(MemoryError,))
    assert not capture_and_replay(out_of_memory, lambda g: None, lambda: "").captured  # otherwise the finding


def test_timed_calls_keep_the_runtime_stage_fields() -> None:
    from opgate.gpu.probes.timing import Samples, TimedCalls

    timed = TimedCalls(Samples.of([10.0, 12.0, 11.0, 30.0]), l2_flushed=True, input_sets=3)
    assert (timed.median_us, timed.min_us, timed.samples) == (11.5, 10.0, 4)
    assert timed.p95_us == pytest.approx(27.3)
    assert set(timed.to_dict()) == {"median_us", "p95_us", "min_us", "samples", "l2_flushed", "input_sets",
                                    "first_call_s", "host_submit_us"}
    assert timed.to_dict()["first_call_s"] is None  # no untimed first call was made


def test_a_slow_call_is_timed_fewer_times_within_the_budget_and_a_fast_one_as_asked() -> None:
    from opgate.gpu.probes.timing import FEWEST_TIMED_CALLS, TIMED_CALLS_BUDGET_S, calls_within

    assert calls_within(1e-4, 50) == 50  # 5 ms of calls: all of them
    assert calls_within(TIMED_CALLS_BUDGET_S / 20, 50) == 20
    assert calls_within(1.0, 50) == FEWEST_TIMED_CALLS  # fla's linear cross-entropy at a Llama-3 vocabulary
    assert calls_within(1.0, 3) == 3  # never more than asked
    assert calls_within(0.0, 50) == 50 and calls_within(float("nan"), 50) == 50


def test_the_replay_timing_of_a_slow_call_shrinks_to_the_budget() -> None:
    from opgate.gpu.probes.graphs import replay_timing_calls

    assert replay_timing_calls(None) == (20, 5)
    assert replay_timing_calls(1e-5) == (20, 5)  # a 10 us kernel: launch overhead needs the batches
    assert replay_timing_calls(0.05) == (4, 5)  # 2 x 5 x 4 calls of 50 ms: 2 s
    assert replay_timing_calls(0.3) == (1, 3)  # 6 calls of 0.3 s, not 200
    assert replay_timing_calls(1.0) is None  # not even those: a second's call saves microseconds of launches


def test_a_call_the_host_submits_in_a_small_share_of_its_gpu_time_is_not_timed_against_its_replays() -> None:
    """A graph saves the host's launches and the gaps between kernels: where the host submits a call in 1% of its GPU
    time, a graph saves less than that, and the replay timing (up to 2 s while the GPU is held alone) is left out."""
    from opgate.gpu.probes.graphs import HOST_BOUND_SHARE, replay_timing_calls

    assert replay_timing_calls(0.01, host_submit_s=1e-4) is None  # 100 us of launches for 10 ms on the GPU
    assert replay_timing_calls(1e-4, host_submit_s=9e-5) == (20, 5)  # launch-bound: a graph may save much of it
    at_share = 0.05 * HOST_BOUND_SHARE
    assert replay_timing_calls(0.05, host_submit_s=at_share) == (4, 5)  # at the share: timed (within the budget)
    assert replay_timing_calls(0.05, host_submit_s=None) == (4, 5)  # not recorded: as before


def test_the_runtime_check_says_why_the_launch_overhead_was_not_timed() -> None:
    from opgate.gpu.probes.graphs import HOST_BOUND, TOO_SLOW
    from opgate.gpu.probes.timing import Samples, TimedCalls
    from opgate.verify.runtime import launch_not_timed_because

    gpu_bound = TimedCalls(Samples.of([10_000.0] * 5), l2_flushed=True, input_sets=3, host_submit_us=80.0)
    assert launch_not_timed_because(gpu_bound, HOST_BOUND) == (
        "the host submits a call in 80 us, 0.8% of its 10000 us on the GPU, so a graph saves at most about that")
    slow = TimedCalls(Samples.of([1e6] * 5), l2_flushed=True, input_sets=3)
    assert launch_not_timed_because(slow, TOO_SLOW) == "a call takes 1 s, against microseconds of launch overhead"


def test_the_probe_and_the_report_share_one_rule_for_a_gpu_bound_call() -> None:
    from opgate.gpu.probes.graphs import gpu_bound, replay_timing_calls

    assert gpu_bound(0.01, 1e-4) and replay_timing_calls(0.01, host_submit_s=1e-4) is None
    assert not gpu_bound(1e-4, 9e-5) and not gpu_bound(0.01, None) and not gpu_bound(None, 1e-4)


def test_the_sync_debug_modes_prototype_notice_is_no_sync_point(monkeypatch) -> None:
    """torch warns when the mode is set that it is a prototype; only what the call itself does is a sync point
    (the notice stood in every runtime result's graph facts of the H100 library runs)."""
    import warnings

    import torch

    from opgate.gpu.probes import graphs

    modes = ["off"]

    def set_mode(mode) -> None:
        if mode == "warn":
            warnings.warn("Synchronization debug mode is a prototype feature and does not yet detect all "
                          "synchronizing operations", UserWarning)
        modes.append(mode)

    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: "off")
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", set_mode)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)

    def reads_back(x):
        warnings.warn("called a synchronizing CUDA operation", UserWarning)
        return x

    points = graphs.find_sync_points(reads_back, (1,))
    assert len(points) == 1 and points[0].startswith("called a synchronizing CUDA operation at "), points
    assert graphs.find_sync_points(lambda x: x, (1,)) == []
    assert modes[-1] == "off"  # the caller's mode is back


def test_after_the_estimate_a_slow_call_skips_the_warm_ups_and_its_estimate_is_a_sample() -> None:
    """time_cuda's calls after the untimed first call and the timed estimate (warmup=5 asked, 50 timed calls)."""
    from opgate.gpu.probes.timing import FEWEST_TIMED_CALLS, AfterEstimate, plan_after_estimate

    assert plan_after_estimate(1e-4, 5, 50, 2.0) == AfterEstimate(3, 50, False)  # fast: as asked
    assert plan_after_estimate(0.1, 5, 50, 2.0) == AfterEstimate(3, 20, False)  # 0.3 s of warm-ups fit 0.5 s
    # fla's linear cross-entropy at 0.2 s a call: no warm-up, the estimate and 9 more timed calls (2 s in all)
    assert plan_after_estimate(0.2, 5, 50, 2.0) == AfterEstimate(0, 9, True)
    assert plan_after_estimate(0.68, 5, 50, 2.0) == AfterEstimate(0, FEWEST_TIMED_CALLS - 1, True)
    assert plan_after_estimate(0.68, 5, 1, 2.0) == AfterEstimate(0, 1, False)  # one call asked: no budget binds


class _StandInAllocator:
    """torch as release_abandoned_pool reads it: reserved and allocated bytes, empty_cache (gives back what no pool
    keeps), and torch._C._cuda_releasePool where `releasable` (the pool's memory goes back at the next empty_cache;
    "raises": the allocator no longer counts the pool as the graph's, as after a reset() that released it)."""

    def __init__(self, kept: int, releasable: bool | str) -> None:
        from types import SimpleNamespace

        self.kept, self.released = kept, []
        self.cuda = SimpleNamespace(empty_cache=lambda: None, memory_reserved=lambda: (2 << 30) + self.kept,
                                    memory_allocated=lambda: 2 << 30, current_device=lambda: 0)
        self.raises = releasable == "raises"
        self._C = SimpleNamespace(_cuda_releasePool=self._release) if releasable else SimpleNamespace()

    def _release(self, device: int, pool: tuple) -> None:
        self.released.append((device, pool))
        if self.raises:
            raise RuntimeError("uc >= 0 INTERNAL ASSERT FAILED at CUDACachingAllocator.cpp")
        self.kept = 0


def test_a_failed_captures_kept_pool_is_released_by_its_id_or_reported() -> None:
    """After a capture that failed and did not end: nothing kept (a PyTorch whose reset() released it) is left
    alone; a kept pool is released by its id; where that cannot be done the kept bytes are returned, so the worker
    retires."""
    from opgate.gpu.probes.graphs import release_abandoned_pool

    clean = _StandInAllocator(kept=0, releasable=True)
    assert release_abandoned_pool(clean, (0, 7), capture_ended=False) == 0 and clean.released == []
    leaked = _StandInAllocator(kept=16 << 30, releasable=True)
    assert release_abandoned_pool(leaked, (0, 7), capture_ended=False) == 0 and leaked.released == [(0, (0, 7))]
    stuck = _StandInAllocator(kept=16 << 30, releasable=False)
    assert release_abandoned_pool(stuck, (0, 7), capture_ended=False) == 16 << 30
    refused = _StandInAllocator(kept=3 << 30, releasable="raises")  # not the graph's any more: retire, not reuse
    assert release_abandoned_pool(refused, (0, 7), capture_ended=False) == 3 << 30


def test_the_pool_of_a_capture_that_ended_is_never_released_again() -> None:
    """A capture that ran out of memory ended, and reset() released its pool; what its split blocks still hold while
    the failure's traceback keeps their tensors is no leak. A second release took the pool's use count below zero
    and every later empty_cache of that warm worker raised (forty-ninth session, one worker, 44 runtime checks)."""
    from opgate.gpu.probes.graphs import release_abandoned_pool

    held = _StandInAllocator(kept=768 << 20, releasable=True)
    assert release_abandoned_pool(held, (0, 7), capture_ended=True) == 0 and held.released == []


def test_the_capture_notes_whether_capture_end_returned() -> None:
    """_EndNoted: ended after an exit that returned (also when the body raised: the error still propagates), not
    after an exit that raised (a capture the failure invalidated)."""
    from opgate.gpu.probes.graphs import _EndNoted

    ended: list[bool] = []
    with pytest.raises(MemoryError):
        with _EndNoted(_GraphLike(False), ended):
            raise MemoryError("out of memory under capture")
    assert ended == [True]
    ended.clear()
    with pytest.raises(RuntimeError, match="previous error"):
        with _EndNoted(_GraphLike(True), ended):
            raise ValueError("a host read")
    assert ended == []


class _GraphLike:
    """torch.cuda.graph's shape of context: its __exit__ ends the capture and may raise; it never suppresses."""

    def __init__(self, exit_raises: bool) -> None:
        self.exit_raises = exit_raises

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        if self.exit_raises:
            raise RuntimeError("operation failed due to a previous error during capture")
