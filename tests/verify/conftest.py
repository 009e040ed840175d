"""Shared fixtures for `opgate verify` tests: the softmax spec under tests/data/verify."""

from __future__ import annotations

import pytest

from tests_verify_support import DATA


@pytest.fixture(scope="session")
def softmax_op():
    from opgate.core.spec import load_spec_file

    return load_spec_file(DATA / "softmax_spec.py")[0]


def gpu_reason() -> str | None:
    """Why GPU tests cannot run here, asking the device rather than the platform."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    return None
