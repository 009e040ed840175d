"""Shared fixtures for `opgate verify` tests: the softmax spec under tests/data/verify."""

from __future__ import annotations

import pytest

from tests_verify_support import DATA, gpu_reason  # noqa: F401 - gpu_reason for tests that import it from here


@pytest.fixture(scope="session")
def softmax_op():
    from opgate.core.spec import load_spec_file

    return load_spec_file(DATA / "softmax_spec.py")[0]
