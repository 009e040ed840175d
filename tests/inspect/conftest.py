"""pytest fixtures for the `opgate inspect` tests."""

from __future__ import annotations

import pytest

from inspect_helpers import find_cuobjdump, find_nvcc


@pytest.fixture(scope="session")
def cuobjdump() -> str:
    tool = find_cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found (install the nvidia-cuda-cuobjdump wheel); goldens still compared")
    return tool


@pytest.fixture(scope="session")
def nvcc() -> str:
    tool = find_nvcc()
    if tool is None:
        pytest.skip("nvcc not found: fresh fixtures cannot be built here; committed fixtures still tested")
    return tool
