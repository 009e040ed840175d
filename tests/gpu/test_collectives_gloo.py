"""The collectives' process handling, timing and straggler logic, run for real: 2-4 rank processes over gloo on CPU
tensors, the same code the doctor check runs over NCCL (opgate.gpu.probes.collectives). Small sizes keep it fast."""

from __future__ import annotations

import pytest

from opgate.gpu.judge.collectives import render_sweep
from opgate.gpu.probes.collectives import (
    MULTICAST_OFF_ENV, OPS, CollectiveConfig, CollectiveRunError, bus_factor, effective_size, message_sizes,
    run_collectives)

pytest.importorskip("torch.distributed")


def test_two_ranks_sweep_every_collective_correctly() -> None:
    sizes = tuple(message_sizes(8, 64 << 10, 16))  # 8 B, 128 B, 2 KiB, 32 KiB
    run = run_collectives(CollectiveConfig("gloo", 2, sizes=sizes, probe_bytes=1024, probe_iterations=4,
                                           timeout_s=120))
    assert run.ranks == 2 and run.devices == ("cpu", "cpu")
    assert [(r.op, r.size_bytes) for r in run.results] == [(op, effective_size(op, s, 2)) for op in OPS for s in sizes]
    for row in run.results:
        assert row.correct, row
        assert len(row.per_rank_s) == 2 and all(t > 0 for t in row.per_rank_s)
        assert row.time_s == pytest.approx(sum(row.per_rank_s) / 2)
        assert row.busbw_gbs == pytest.approx(row.algbw_gbs * bus_factor(row.op, 2))
    # every child really ran with NVLink multicast off, whatever this process's environment says
    assert run.env == MULTICAST_OFF_ENV
    assert run.size_cap_bytes and run.size_cap_bytes > 0
    table = render_sweep(run)
    assert "all_gather" in table and "broadcast" in table


def test_planted_straggler_is_named_among_four_ranks() -> None:
    run = run_collectives(CollectiveConfig("gloo", 4, ops=("all_reduce",), sizes=(8, 4096), probe_bytes=4096,
                                           probe_iterations=6, planted_delay_rank=2, planted_delay_s=0.02,
                                           timeout_s=120))
    s = run.straggler
    assert s is not None and s.slowest_rank == 2, s
    assert s.last_counts[2] >= 5 and s.slowest_lag_us > 10_000  # 20 ms late, every iteration or nearly
    assert "slowest rank 2" in render_sweep(run)


def test_a_rank_that_cannot_start_is_named_with_its_output() -> None:
    # nccl on a host without GPUs: each rank exits 3 before joining, saying why
    with pytest.raises(CollectiveRunError, match=r"rank \d exited with code 3; .*need 2 GPUs"):
        run_collectives(CollectiveConfig("nccl", 2, sizes=(8,), timeout_s=60))


def test_a_hung_rank_is_killed_at_the_timeout() -> None:
    # rank 1 sleeps 60 s in the probe: every rank is stuck; the launcher kills them all at the timeout
    with pytest.raises(CollectiveRunError, match="did not finish within 8 s"):
        run_collectives(CollectiveConfig("gloo", 2, ops=("broadcast",), sizes=(8,), probe_iterations=1,
                                         planted_delay_rank=1, planted_delay_s=60.0, timeout_s=8))
