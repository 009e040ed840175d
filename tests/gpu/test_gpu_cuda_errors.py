"""The CUDA error table agrees with the CUDA runtime's own enum (cuda-bindings), name and stickiness."""

from __future__ import annotations

import re

import pytest

from opgate.gpu.judge.cuda_errors import cuda_error_code_in, cuda_error_table, explain_cuda_error

cudart = pytest.importorskip("cuda.bindings.runtime", reason="cuda-bindings is not installed")

STICKY_WORDS = ("terminated and relaunched", "any further cuda work will return the same error")


def test_names_match_the_runtime_enum() -> None:
    for code, info in cuda_error_table().items():
        assert cudart.cudaError_t(code).name == info.name, code


def test_sticky_exactly_where_the_runtime_documentation_says_the_process_must_restart() -> None:
    for code, info in cuda_error_table().items():
        doc = re.sub(r"\s+", " ", cudart.cudaError_t(code).__doc__ or "").lower()
        assert info.sticky == any(words in doc for words in STICKY_WORDS), (code, info.name)


def test_explanations_for_the_codes_recovery_meets() -> None:
    illegal = explain_cuda_error(700)
    assert illegal is not None and illegal.sticky and "restart" in illegal.one_line()
    oom = explain_cuda_error(2)
    assert oom is not None and not oom.sticky and "retry" in oom.action
    assert explain_cuda_error(123456) is None


@pytest.mark.parametrize(("text", "code"), [
    ("CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access was encountered", 700),
    ("CUDADriverError: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered", 700),
    ('Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure"', 719),
    ("cudaErrorMemoryAllocation: out of memory", 2),
    ("nothing to see", None),
])
def test_error_codes_in_messages(text: str, code: int | None) -> None:
    assert cuda_error_code_in(text) == code
