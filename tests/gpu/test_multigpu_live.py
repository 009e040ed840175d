"""On a GPU host: the collectives over NCCL, the link matrix and contention, measured. Marked gpu; the multi-GPU ones
skip with "needs 2 or more GPUs" on a one-GPU host, where the check itself must say `skipped`."""

from __future__ import annotations

import pytest

from opgate.checks.base import CheckContext
from opgate.model.results import Outcome


def gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return 0


multi = pytest.mark.skipif(gpu_count() < 2, reason="needs 2 or more GPUs")


@pytest.mark.gpu
def test_collectives_check_skips_on_one_gpu() -> None:
    if gpu_count() != 1:
        pytest.skip("this host does not have exactly one GPU")
    from opgate.doctor.collectives import CollectivesCheck

    result = CollectivesCheck().run(CheckContext(level="standard"))
    assert result.outcome == Outcome.SKIPPED
    assert result.reason == "collectives need 2 or more GPUs; this host has 1"


@pytest.mark.gpu
@multi
def test_nccl_sweep_is_correct_and_sane() -> None:
    from opgate.gpu.probes.collectives import CollectiveConfig, message_sizes, run_collectives

    n = gpu_count()
    run = run_collectives(CollectiveConfig("nccl", n, sizes=tuple(message_sizes(8, 64 << 20, 8)), timeout_s=180))
    assert all(r.correct for r in run.results)
    assert run.env["NCCL_NVLS_ENABLE"] == "0"
    top = run.largest("all_reduce")
    assert top is not None and top.busbw_gbs > 1.0  # any real GPU link moves more than 1 GB/s at 64 MiB
    assert run.straggler is not None and 0 <= run.straggler.slowest_rank < n


@pytest.mark.gpu
@multi
def test_link_matrix_and_contention_measure_every_pair() -> None:
    from opgate.gpu.probes.contention import measure_pair_contention
    from opgate.gpu.probes.link_matrix import measure_link_matrix

    n = gpu_count()
    m = measure_link_matrix(transfer_bytes=32 << 20, reps=2)
    assert len(m.pairs) == n * (n - 1)
    assert all(p.copy_gbs > 0 and p.latency_us > 0 for p in m.pairs)
    assert all(p.read_gbs and p.write_gbs for p in m.pairs if p.peer_access)
    c = measure_pair_contention(list(range(n)), transfer_bytes=16 << 20, repeats=2)
    assert set(c.alone_gbs) == set(c.together_gbs) and len(c.alone_gbs) == n * (n - 1)
