"""GPU tests here carry @pytest.mark.gpu and skip with the reason when no usable GPU is present
(no driver, no device, CuPy missing): the same gate opgate's probes use."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(autouse=True)
def _skip_gpu_tests_without_a_gpu(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("gpu") is None:
        return
    from opgate.gpu.device import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"GPU test: {reason}")
