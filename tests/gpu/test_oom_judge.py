"""Whose demand made an allocation fail, from recorded device-memory figures (CPU; opgate.gpu.judge.oom)."""

from __future__ import annotations

import pytest

from opgate.gpu.judge.oom import (
    OTHERS, OWN, UNMEASURED, OomFacts, is_out_of_memory, judge_oom, others_slack, requested_bytes,
)

GiB = 1 << 30
H200 = int(139.8 * GiB)  # torch.cuda.mem_get_info's total on the H200 host


@pytest.mark.parametrize(("message", "size"), [
    ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB", 2 * GiB),
    ("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.35 GiB total capacity)", 20 << 20),
    ("Out of memory allocating 1,073,741,824 bytes (allocated so far: 4,096 bytes).", 1 << 30),  # CuPy
    ("CUDA error: out of memory", None),
])
def test_the_failed_request_is_read_from_torchs_and_cupys_messages(message: str, size: int | None) -> None:
    assert requested_bytes(message) == size
    assert is_out_of_memory(["RuntimeError"], message)


def test_out_of_memory_by_class_name_or_cuda_error_text_only() -> None:
    assert is_out_of_memory(["OutOfMemoryError"], "")
    assert is_out_of_memory(["CUDARuntimeError"], "cudaErrorMemoryAllocation: out of memory")
    assert is_out_of_memory(["RuntimeError"], "CUDA_ERROR_OUT_OF_MEMORY")
    # Triton's launcher (a kernel's local memory at its first launch, outside torch's allocator)
    assert is_out_of_memory(["RuntimeError"], "Triton Error [CUDA]: out of memory")
    assert not is_out_of_memory(["RuntimeError"], "Triton Error [CUDA]: an illegal memory access was encountered")
    assert not is_out_of_memory(["RuntimeError", "ValueError"], "shape '[4, 8]' is invalid for input of size 31")


def test_another_run_filling_the_card_means_the_case_cannot_be_judged() -> None:
    verdict = judge_oom(OomFacts(free_bytes=GiB // 10, total_bytes=H200, own_bytes=GiB, other_pids=(31337,)))
    assert verdict.cause == OTHERS and not verdict.judged
    assert verdict.detail.startswith("another process holds 138.7 GiB of the GPU (NVML lists pid 31337); 0.1 GiB "
                                     "free of 139.8 GiB")


def test_memory_held_by_this_process_alone_is_the_implementations_demand() -> None:
    verdict = judge_oom(OomFacts(free_bytes=GiB // 2, total_bytes=H200, own_bytes=H200 - GiB))
    assert verdict.cause == OWN and verdict.judged and "the memory went to this case" in verdict.detail


def test_the_slack_covers_this_processs_own_context_and_workspaces() -> None:
    assert others_slack(H200) == int(0.05 * H200) and others_slack(16 * GiB) == 2 * GiB
    just_inside = judge_oom(OomFacts(free_bytes=0, total_bytes=H200, own_bytes=H200 - others_slack(H200)))
    assert just_inside.cause == OWN
    just_over = judge_oom(OomFacts(free_bytes=0, total_bytes=H200, own_bytes=H200 - others_slack(H200) - GiB))
    assert just_over.cause == OTHERS


def test_a_request_the_card_could_never_give_is_own_even_beside_another_process() -> None:
    verdict = judge_oom(OomFacts(free_bytes=40 * GiB, total_bytes=H200, own_bytes=GiB, requested_bytes=600 * GiB))
    assert verdict.cause == OWN and "asked for 600.0 GiB, more than this card could give it" in verdict.detail
    fits_if_alone = judge_oom(OomFacts(free_bytes=GiB, total_bytes=H200, own_bytes=GiB, requested_bytes=100 * GiB))
    assert fits_if_alone.cause == OTHERS


def test_without_figures_opgate_cannot_show_the_demand_and_does_not_judge() -> None:
    verdict = judge_oom(None, "no CUDA device is visible to torch in this process")
    assert verdict.cause == UNMEASURED and not verdict.judged and "no CUDA device" in verdict.detail
