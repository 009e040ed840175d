"""On a real GPU: each probe measures, proves its own work was right, and gives plausible figures; the
planted programs' clean twins compute the right answer; the recovery worker really loses its context to
the planted illegal store. Kept short (well under a minute on an H200): the full doctor level, the
sanitizer suite and the recovery trials run from scripts/gpu_check.sh. Skipped without a usable GPU."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from opgate_testing import DATA, data_module

PLANTED_CASES = data_module("gpu/gpu_planted").PLANTED_CASES

pytestmark = [
    pytest.mark.gpu,
    # third-party GPU stacks may warn at import (CUDA path detection and the like): not opgate's warnings
    pytest.mark.filterwarnings("ignore:::cupy.*"),
    pytest.mark.filterwarnings("ignore:::cupy_backends.*"),
    pytest.mark.filterwarnings("ignore:::cuda.*"),
]
SRC = Path(__file__).resolve().parents[2] / "src"
MiB = 1 << 20


@pytest.fixture(autouse=True)
def _needs_a_usable_gpu() -> None:
    """Skip with opgate's own reason (no driver, no device, CuPy missing): the gate the probes use."""
    from opgate.gpu.probes.device import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"GPU test: {reason}")


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))


def test_hbm_probe() -> None:
    from opgate.gpu.probes.bandwidth import measure_hbm
    from opgate.gpu.judge.references import datasheet_bandwidth

    m = measure_hbm(0, buffer_bytes=1024 * MiB, reps=5)
    assert m.read.tbs > 0.05 and math.isfinite(m.read.tbs)
    assert m.copy_kernel is not None and m.memcpy is not None  # the copy kernel's output was verified inside
    assert 0.3 < m.copy_kernel.tbs / m.memcpy.tbs < 3.0
    assert m.torch_copy is not None or m.torch_note
    sheet = datasheet_bandwidth(m.device.name)
    if sheet is not None:  # faster than the datasheet would mean a cache served the "HBM" read
        assert m.read.tbs < 1.05 * sheet.tbs
    json.dumps(m.to_dict())


def test_l2_probe() -> None:
    from opgate.gpu.probes.bandwidth import measure_l2

    m = measure_l2(0, reps=5)
    assert m.working_set_bytes <= m.device.l2_bytes // 4 + 4096 and m.passes >= 1
    assert m.l2_read.tbs > 0 and m.hbm_read.tbs > 0
    json.dumps(m.to_dict())


def test_host_link_probe() -> None:
    from opgate.gpu.probes.host_links import measure_host_links

    m = measure_host_links(0, transfer_bytes=64 * MiB, reps=3, pageable_reps=2)
    for figure in (m.h2d_pinned, m.d2h_pinned, m.h2d_pageable, m.d2h_pageable):
        assert figure.gbs > 0.1
    assert m.bidirectional_pinned.aggregate_gbs > 0
    assert m.link is not None or m.link_error
    json.dumps(m.to_dict())


def test_p2p_probe() -> None:
    from opgate.gpu.probes.device import device_count
    from opgate.gpu.probes.p2p import measure_p2p

    if device_count() < 2:
        pytest.skip("one GPU: peer-to-peer needs two")
    m = measure_p2p(transfer_bytes=32 * MiB, reps=2, latency_copies=20)
    assert len(m.pairs) == device_count() * (device_count() - 1)
    assert all(p.bandwidth_gbs > 0 and p.latency_us > 0 for p in m.pairs)


def test_launch_latency_probe() -> None:
    from opgate.gpu.probes.launch import measure_launch_latency

    m = measure_launch_latency(0, kernels_per_run=200, runs=3)  # counts every launch and replay inside
    assert m.eager_us.median > 0 and m.graph_us.median > 0


def test_event_timing_probe() -> None:
    from opgate.gpu.probes.events import measure_event_timing

    m = measure_event_timing(0, back_to_back=64, roundtrips=50, spin_us=1000.0, queue_probe=1024, chain_steps=64)
    assert m.chain_ok and m.launch_returned_before_done
    assert m.spin_error_fraction < 0.2  # events and %globaltimer agree on a 1 ms wait
    assert m.roundtrip_us.median > 0
    assert m.timer_step_us is not None and 0 < m.timer_step_us <= 2.0  # CUDA documents about 0.5 us
    assert m.timer_step_us <= m.smallest_step_us  # records back to back cannot be closer than one clock step


def test_stream_priority_probe() -> None:
    from opgate.gpu.probes.priority import measure_stream_priority

    m = measure_stream_priority(0, samples=5, hog_kernels_per_stream=10)  # counts every hog block inside
    if not m.supported:
        pytest.skip(f"{m.device.name} has no stream priorities")
    assert m.high_us is not None and m.equal_us is not None and m.high_us.median > 0


@pytest.mark.parametrize("case", [c.name for c in PLANTED_CASES])
def test_planted_clean_twins_compute_the_right_answer(case: str) -> None:
    done = subprocess.run([sys.executable, str(DATA / "gpu" / "gpu_planted.py"), case, "clean"], capture_output=True,
                          text=True, env=_env(), timeout=120)
    record = json.loads(done.stdout.split("OPGATE_PLANTED ", 1)[1])
    if done.returncode == 4:
        pytest.skip(record["detail"])
    assert done.returncode == 0 and record["status"] == "verified", done.stdout + done.stderr


def test_recovery_worker_computes_then_loses_its_context() -> None:
    WorkerProcess = data_module("gpu/gpu_recovery").WorkerProcess
    STICKY_EXIT_CODE = data_module("gpu/gpu_recovery_worker").STICKY_EXIT_CODE

    worker = WorkerProcess()
    try:
        answer = worker.request({"op": "compute", "seed": 5})
        assert answer["correct"] and answer["rel_error"] < 1e-6 and answer["all_written"]
        fault = worker.request({"op": "poison"}, timeout_s=60)
        assert fault["faulted"] and fault["sticky"] and fault["cuda_error"] in (700, 719), fault
        assert worker.exit_code(wait_s=30) == STICKY_EXIT_CODE
    finally:
        worker.close(graceful=False)
