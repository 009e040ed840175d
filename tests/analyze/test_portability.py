"""Portability matrix with real Triton compiles (no GPU): each (implementation, target) in its own process."""

from __future__ import annotations

from pathlib import Path

import pytest

from opgate.core.limits import sm_limits
from opgate.analyze.portability import (
    CompileOutcome,
    KernelReport,
    MatrixRequest,
    Target,
    error_headline,
    occupancy_static_shared,
    parse_targets,
    run_matrix,
)
from opgate.analyze.resources import parse_res_usage
from opgate.analyze.run import _portability_result
from opgate.model.errors import InputError
from opgate.model.results import Outcome

DATA = Path(__file__).resolve().parents[1] / "data" / "analyze"
OPS = DATA / "analyze_ops.py"
EDGE = DATA / "portability_edge_ops.py"


def _request(spec: Path, operator: str, target: str) -> MatrixRequest:
    return MatrixRequest(spec, operator, "triton", parse_targets(target)[0])


@pytest.fixture(scope="module")
def matrix() -> dict[tuple[str, str], CompileOutcome]:
    requests = [
        _request(OPS, "vector_add", "sm_80"),
        _request(OPS, "softmax", "sm_90"),
        _request(EDGE, "fp8_dot", "sm_80"),
        _request(EDGE, "fp8_dot", "sm_89"),
        _request(EDGE, "big_tile_matmul", "sm_86"),
        _request(EDGE, "big_tile_matmul", "sm_90"),
        _request(EDGE, "needs_gpu", "sm_90"),
    ]
    outcomes = run_matrix(requests, jobs=2, timeout_s=300)
    return {(o.operator, o.target): o for o in outcomes}


def test_vector_add_compiles_with_registers_from_the_cubin(matrix):
    outcome = matrix[("vector_add", "sm_80")]
    assert outcome.status == "ok", outcome
    # 2 dtypes x (N=4096, a multiple of 16, and N=1000): four specializations, four distinct labels
    assert sorted(k.dtypes for k in outcome.kernels) == [("float16",), ("float16",), ("float32",), ("float32",)]
    assert len({k.label for k in outcome.kernels}) == 4
    assert sum("n%16" in k.label for k in outcome.kernels) == 2
    for kernel in outcome.kernels:
        assert kernel.kernel_name == "_add_kernel"
        assert kernel.num_warps == 4
        assert 8 <= kernel.registers < 64  # a tiny kernel: ptxas' register count, read back from the cubin
        assert kernel.resources_source in ("opgate.inspect.cubin", "cuobjdump -res-usage")
        assert kernel.occupancy is not None and kernel.occupancy.fits


def test_softmax_kernels_get_occupancy_per_specialization(matrix):
    outcome = matrix[("softmax", "sm_90")]
    assert outcome.status == "ok", outcome
    blocks = {k.label.split("BLOCK=")[1].split(",")[0] for k in outcome.kernels}
    assert blocks == {"1024", "4096"}
    for kernel in outcome.kernels:
        occ = kernel.occupancy
        assert occ is not None
        # Triton sizes dynamic shared memory for the reductions; sm_90 cubins carry the reserved 1 KB,
        # which opgate removes again (the driver adds it back itself).
        assert kernel.static_shared_bytes == 0
        assert kernel.dynamic_shared_bytes > 0
        assert occ.launch.threads_per_block == kernel.num_warps * 32


def test_fp8_is_a_compile_error_before_ada(matrix):
    failed = matrix[("fp8_dot", "sm_80")]
    assert failed.status == "compile_error"
    assert "fp8e4nv not supported in this architecture" in failed.message
    assert "\n" not in failed.message
    assert matrix[("fp8_dot", "sm_89")].status == "ok"


def test_shared_memory_over_the_per_block_limit_is_a_resource_overflow(matrix):
    overflow = matrix[("big_tile_matmul", "sm_86")]
    assert overflow.status == "resource_overflow"
    (kernel,) = overflow.kernels
    assert kernel.shared_bytes > sm_limits("8.6").smem_per_block_optin
    assert kernel.occupancy is None
    assert "sm_86 allows at most 101376 B" in overflow.message
    hopper = matrix[("big_tile_matmul", "sm_90")]
    assert hopper.status == "ok"
    assert hopper.kernels[0].shared_bytes <= sm_limits("9.0").smem_per_block_optin


def test_a_launcher_that_needs_a_gpu_is_a_capture_error(matrix):
    outcome = matrix[("needs_gpu", "sm_90")]
    assert outcome.status == "capture_error"
    assert "CUDA" in outcome.message


def test_results_judge_required_and_optional_targets(matrix):
    failed = _portability_result(matrix[("fp8_dot", "sm_80")], required=True)
    assert failed.outcome is Outcome.FAILED
    assert failed.remediation
    assert _portability_result(matrix[("fp8_dot", "sm_80")], required=False).outcome is Outcome.WARNED
    passed = _portability_result(matrix[("vector_add", "sm_80")], required=True)
    assert passed.outcome is Outcome.PASSED
    assert CompileOutcome.from_dict(passed.extra["compile"]).kernels[0].registers is not None


def test_a_compile_that_runs_out_of_time_is_stopped():
    (outcome,) = run_matrix([_request(OPS, "softmax", "sm_80")], jobs=1, timeout_s=0.5)
    assert outcome.status == "timeout"
    assert "0.5 s" in outcome.message


def test_parse_targets_accepts_sm_numbers_cc_and_gpu_names():
    targets = parse_targets("sm_80, 9.0,h100,100,sm_120a")
    assert targets == [Target("sm_80", 80), Target("sm_90", 90), Target("sm_100", 100), Target("sm_120", 120)]
    with pytest.raises(InputError, match="neither an sm_XY"):
        parse_targets("hopper")
    with pytest.raises(InputError, match="empty"):
        parse_targets(",")


def test_static_shared_mapping_from_cubin_sections():
    # sm_90+ cubins hold the reserved 1 KB in the kernel's .nv.shared section; earlier ones do not.
    assert occupancy_static_shared(1040, 90, sm_limits("9.0")) == 16
    assert occupancy_static_shared(1024, 100, sm_limits("10.0")) == 0
    assert occupancy_static_shared(0, 90, sm_limits("9.0")) == 0
    assert occupancy_static_shared(4096, 80, sm_limits("8.0")) == 4096


def test_parse_res_usage_reads_cuobjdump_output():
    text = (
        "\nResource usage:\n Common:\n  GLOBAL:0\n Function _add_kernel:\n"
        "  REG:26 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:544 TEXTURE:0 SURFACE:0 SAMPLER:0\n"
        " Function other:\n  REG:255 STACK:1224 SHARED:0 LOCAL:8 CONSTANT[0]:392 TEXTURE:0 SURFACE:0 SAMPLER:0\n"
    )
    usage = parse_res_usage(text)
    assert usage["_add_kernel"]["REG"] == 26 and usage["_add_kernel"]["SHARED"] == 1024
    assert usage["other"]["STACK"] == 1224 and usage["other"]["LOCAL"] == 8


def test_error_headline_picks_the_cause():
    class CompilationError(Exception):
        pass

    triton_style = CompilationError('at 1:0:\ndef mm(a_ptr):\n^\nValueError("type fp8e4nv not supported")')
    assert error_headline(triton_style) == 'ValueError("type fp8e4nv not supported")'
    ptxas_style = RuntimeError("PTXAS error: Internal Triton PTX codegen error\n`ptxas` stderr:\n"
                               "ptxas fatal   : Value 'sm_70' is not defined for option 'gpu-name'\n")
    assert error_headline(ptxas_style).startswith("ptxas fatal")
    assert error_headline(ValueError("bad\nmore")) == "ValueError: bad"


def test_kernel_report_round_trips():
    report = KernelReport("k[BLOCK=1]", "k", "spills", "local", ("float16",), 2, "", 4, 1, 40, 0, 512, 16,
                          "cuobjdump -res-usage", ("note",))
    assert KernelReport.from_dict(report.to_dict()) == report


def test_a_child_that_dies_is_reported_as_crashed_with_its_stderr():
    (outcome,) = run_matrix([_request(DATA / "crashing_ops.py", "crash", "sm_90")], jobs=1, timeout_s=120)
    assert outcome.status == "crashed"
    assert "exited with code 7" in outcome.message
    assert "simulated compiler crash" in outcome.details
    result = _portability_result(outcome, required=True)
    assert result.outcome is Outcome.ERROR
