"""CUDA graph capture on a real GPU: a clean implementation captures and matches eager; ones that read a
device value on the host or synchronize inside capture fail with the cause named."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


def clean(x):
    return (x * 2.0 + 1.0).relu()


def reads_item(x):
    scale = x.abs().max().item()
    return x / scale


def synchronizes(x):
    import torch

    y = x * 2
    torch.cuda.synchronize()
    return y


def test_clean_implementation_captures_and_matches_eager() -> None:
    torch = pytest.importorskip("torch")
    from opgate.measure.graph_capture import check_graph_capture

    x = torch.randn(1 << 20, device="cuda")
    report = check_graph_capture(clean, (x,), (torch.randn_like(x),))
    assert report.captured and report.matches_eager, report
    assert report.graph_us_per_call is not None and report.graph_us_per_call > 0


@pytest.mark.parametrize(("fn", "cause"), [(reads_item, "host read"), (synchronizes, "synchroniz")])
def test_capture_failures_name_the_cause(fn, cause) -> None:
    torch = pytest.importorskip("torch")
    from opgate.measure.graph_capture import check_graph_capture

    report = check_graph_capture(fn, (torch.randn(4096, device="cuda"),))
    assert not report.captured
    assert cause in report.cause, report
    assert report.remedy


def test_time_cuda_reports_median_and_p95() -> None:
    torch = pytest.importorskip("torch")
    from opgate.measure.timing import time_cuda

    sets = [(torch.randn(1 << 24, device="cuda"),) for _ in range(3)]
    stats = time_cuda(clean, sets, repeats=20)
    assert 0 < stats.min_us <= stats.median_us <= stats.p95_us
    assert stats.l2_flushed and stats.input_sets == 3
