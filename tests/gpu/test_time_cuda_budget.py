"""A call so slow that 50 timed calls would take minutes is timed within the budget, and its graph check too (the
runtime stage of fla's linear cross-entropy in float32 at a Llama-3 vocabulary ran past 110 s on the H100)."""

from __future__ import annotations

import time

import pytest


def sleep_cycles(torch, milliseconds: float) -> int:
    """The torch.cuda._sleep cycles that keep this GPU busy about `milliseconds` (measured, not its clock's datasheet)."""
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    probe = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    probe[0].record()
    torch.cuda._sleep(10**8)
    probe[1].record()
    probe[1].synchronize()
    return int(10**8 * milliseconds / probe[0].elapsed_time(probe[1]))


@pytest.mark.gpu
def test_a_call_of_half_a_second_is_timed_five_times_and_its_graph_check_stays_short() -> None:
    torch = pytest.importorskip("torch")
    from opgate.gpu.probes.graphs import check_graph_capture
    from opgate.gpu.probes.timing import FEWEST_TIMED_CALLS, time_cuda

    x = torch.ones(4, device="cuda")
    cycles = sleep_cycles(torch, 500)  # about 0.5 s of GPU time a call

    calls = []

    def slow(t):
        calls.append(1)
        torch.cuda._sleep(cycles)
        return t * 2

    started = time.perf_counter()
    stats = time_cuda(slow, [(x,), (x.clone(),)])
    timed_s = time.perf_counter() - started
    assert stats.samples == FEWEST_TIMED_CALLS and 0.3e6 < stats.median_us < 0.8e6, stats.to_dict()
    # the untimed first call, then the estimate, which is the first of the five timed calls: 6 calls, not 55
    assert len(calls) == FEWEST_TIMED_CALLS + 1 and timed_s < 10, (len(calls), timed_s)
    assert stats.first_call_s is not None and stats.first_call_s >= 0.3, stats.to_dict()  # the untimed call's wall
    started = time.perf_counter()
    graph = check_graph_capture(slow, (x,), (x.clone(),), seconds_per_call=stats.median_us * 1e-6)
    assert graph.captured and graph.matches_eager, graph
    assert graph.saved_us_per_call is None  # launches are not timed against half-second calls
    # the sync-point call (the one warm-up: the timing warmed it), capture, replay, eager: three calls, not 200
    assert time.perf_counter() - started < 3


@pytest.mark.gpu
def test_a_fast_call_is_still_timed_as_many_times_as_asked() -> None:
    torch = pytest.importorskip("torch")
    from opgate.gpu.probes.timing import time_cuda

    x = torch.ones(1 << 16, device="cuda")
    stats = time_cuda(lambda t: t * 2, [(x,)], repeats=50)
    assert stats.samples == 50


@pytest.mark.gpu
def test_a_gpu_bound_call_of_20_ms_is_not_timed_against_its_replays() -> None:
    """The host submits a 20 ms sleep kernel in microseconds: a graph saves less than 5% of it, so the graph check
    leaves out the 2 s of eager calls and replays it would otherwise time while holding the GPU alone."""
    torch = pytest.importorskip("torch")
    from opgate.gpu.probes.graphs import check_graph_capture
    from opgate.gpu.probes.timing import time_cuda

    x = torch.ones(4, device="cuda")
    cycles = sleep_cycles(torch, 20)  # about 20 ms of GPU time a call

    def gpu_bound(t):
        torch.cuda._sleep(cycles)
        return t * 2

    stats = time_cuda(gpu_bound, [(x,), (x.clone(),)])
    assert stats.host_submit_us is not None and stats.host_submit_us < 0.05 * stats.median_us, stats.to_dict()
    started = time.perf_counter()
    graph = check_graph_capture(gpu_bound, (x,), (x.clone(),), seconds_per_call=stats.median_us * 1e-6,
                                host_submit_s=stats.host_submit_us * 1e-6)
    assert graph.captured and graph.matches_eager and graph.saved_us_per_call is None, graph
    assert time.perf_counter() - started < 0.5  # four calls of 20 ms, not the 2 s of replay timing
    assert graph.replay_not_timed == "host_bound", graph
    assert set(graph.seconds) == {"warm_up", "capture", "replay_and_eager"}, graph.seconds  # where the check went
    assert graph.seconds["replay_and_eager"] >= 0.03, graph.seconds  # the replay and the eager call: 20 ms each
