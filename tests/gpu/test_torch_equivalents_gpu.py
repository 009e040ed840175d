"""PyTorch's plain equivalents of the probes (opgate.gpu.probes.torch_equivalents), on a real GPU."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


def test_torch_equivalents_measure_real_work() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    from opgate.gpu.probes import torch_equivalents as te
    from opgate.gpu.judge.references import datasheet_bandwidth

    read = te.hbm_read(0, 1 << 30, reps=5)
    sheet = datasheet_bandwidth(torch.cuda.get_device_name(0))
    assert read.value > 0 and (sheet is None or read.value < 1.05 * sheet.tbs)
    copy = te.device_copy(0, 256 << 20, reps=5)  # read + write counted: never above twice the datasheet
    assert copy.value > 0 and (sheet is None or copy.value < 2 * sheet.tbs) and copy.unit == "TB/s"
    h2d, d2h = te.host_copies(0, 64 << 20, reps=3)
    assert 1.0 < h2d.value < 1000.0 and 1.0 < d2h.value < 1000.0
    eager, graph = te.launch_overhead(0, ops_per_run=200, runs=3)
    assert 0 < graph.value and 0 < eager.value < 1000.0
    step = te.event_timing(0)
    assert 0 < step.value < 100.0
    timer = te.event_timer_step(0)
    assert 0 < timer.value < 5.0  # CUDA documents about 0.5 us
    high, equal = te.stream_priority(0, samples=5, hogs_per_stream=20)
    assert 0 < high.value and 0 < equal.value  # which is faster is the measurement, not the test's to say
