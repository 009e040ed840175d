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
