"""Roofline arithmetic: floors, bounds, FLOP/byte counting fallbacks, achieved fraction, charts."""

from __future__ import annotations

import pytest

import opgate
from opgate.analyze.roofline import (
    analyze_operator,
    measurement_key,
    operator_work,
    peak_for,
    roofline_point,
    write_chart,
)
from opgate.core.gpus import lookup_gpu

torch = pytest.importorskip("torch")


def _matmul(declared: bool) -> opgate.Operator:
    return opgate.Operator(
        "matmul",
        reference=lambda a, b: a @ b,
        inputs=[opgate.TensorSpec("a", ("M", "K")), opgate.TensorSpec("b", ("K", "N"))],
        dims={"M": [4096], "N": [4096], "K": [4096]},
        dtypes=["bfloat16", "float32"],
        flops=(lambda M, N, K: 2 * M * N * K) if declared else None,
        bytes=(lambda M, N, K, itemsize: (M * K + K * N + M * N) * itemsize) if declared else None,
    )


def test_large_bf16_matmul_on_h100_is_compute_bound_with_the_expected_floor():
    work = operator_work(_matmul(declared=True), "bfloat16", {"M": 4096, "N": 4096, "K": 4096})
    assert work.flops == 2 * 4096**3
    assert work.bytes == 3 * 4096**2 * 2
    point = roofline_point(work, lookup_gpu("h100"))
    assert point is not None
    assert point.precision == "bf16"
    # 1.374e11 FLOP / 989.5e12 FLOP/s = 138.9 us; 1.007e8 B / 3.35e12 B/s = 30.0 us
    assert point.compute_s == pytest.approx(2 * 4096**3 / 989.5e12)
    assert point.memory_s == pytest.approx(3 * 4096**2 * 2 / 3.35e12)
    assert point.floor_s == point.compute_s
    assert point.bound == "compute"
    assert work.intensity == pytest.approx(4096 / 3)
    assert point.ridge_intensity == pytest.approx(989.5e12 / 3.35e12)


def test_small_matmul_is_memory_bound():
    work = operator_work(_matmul(declared=True), "bfloat16", {"M": 16, "N": 4096, "K": 4096})
    point = roofline_point(work, lookup_gpu("h100"))
    assert point is not None and point.bound == "memory"
    assert point.floor_s == pytest.approx(work.bytes / 3.35e12)


def test_flop_counter_and_byte_defaults_when_the_operator_declares_neither():
    dims = {"M": 64, "N": 32, "K": 128}
    work = operator_work(_matmul(declared=False), "float32", dims)
    assert work.flops == 2 * 64 * 32 * 128  # torch.utils.flop_counter's mm formula
    assert "flop_counter on meta tensors" in work.flops_source
    assert work.bytes == (64 * 128 + 128 * 32 + 64 * 32) * 4  # inputs read once, output written once
    assert work.bytes_source == "inputs read once + outputs written once"


def test_elementwise_reference_counts_no_flops_and_says_so():
    softmax = opgate.Operator("softmax", reference=lambda x: torch.softmax(x, dim=-1),
                              inputs=[opgate.TensorSpec("x", ("M", "N"))], dims={"M": [8], "N": [1024]})
    work = operator_work(softmax, "float32", {"M": 8, "N": 1024})
    assert work.flops == 0
    assert "0 here; declare flops=" in work.flops_source
    assert work.bytes == 2 * 8 * 1024 * 4
    point = roofline_point(work, lookup_gpu("a100"))
    assert point is not None and point.bound == "memory"
    assert point.floor_s == pytest.approx(work.bytes / 2039e9)


def test_reference_that_cannot_run_on_meta_falls_back_to_cpu():
    op = opgate.Operator("scale", reference=lambda x: x * float(x.sum().item() + 1.0),
                         inputs=[opgate.TensorSpec("x", ("N",))], dims={"N": [16]}, flops=lambda N: N)
    work = operator_work(op, "float32", {"N": 16})
    assert work.bytes == 2 * 16 * 4


def test_peak_selection_per_dtype():
    assert peak_for(lookup_gpu("a100"), "float64") == ("fp64_tc", 19.5e12)  # DMMA beats the CUDA-core rate
    assert peak_for(lookup_gpu("h100"), "float32") == ("fp32", 67e12)  # not TF32: torch does not assume it
    assert peak_for(lookup_gpu("v100"), "bfloat16") is None
    assert peak_for(lookup_gpu("t4"), "float8_e4m3fn") is None
    assert peak_for(lookup_gpu("l4"), "float8_e5m2") == ("fp8", 242.5e12)


def test_analysis_skips_gpus_without_the_precision_and_adds_measured_fractions():
    op = _matmul(declared=True)
    dims = {"M": 4096, "N": 4096, "K": 4096}
    h100 = lookup_gpu("h100")
    floor = roofline_point(operator_work(op, "bfloat16", dims), h100).floor_s  # type: ignore[union-attr]
    analysis = analyze_operator(op, [h100, lookup_gpu("v100")],
                                measured={measurement_key("h100", "bfloat16", dims): floor * 2})
    measured = [p for p in analysis.points if p.measured_s is not None]
    assert len(measured) == 1 and measured[0].achieved_fraction == pytest.approx(0.5)
    assert any(s.startswith("v100 bfloat16") for s in analysis.skipped)
    assert {(p.gpu, p.work.dtype) for p in analysis.points} == {("h100", "bfloat16"), ("h100", "float32"),
                                                               ("v100", "float32")}
    assert any(p.uncertain == () for p in analysis.points)


def test_chart_is_written_as_png_and_svg(tmp_path):
    op = _matmul(declared=True)
    analysis = analyze_operator(op, [lookup_gpu("h100"), lookup_gpu("a100")])
    png, svg = write_chart(analysis, tmp_path / "report")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert "Roofline: matmul" in text or "Roofline" in text
    first = svg.read_bytes()
    write_chart(analysis, tmp_path / "report")
    assert svg.read_bytes() == first  # reruns write identical SVGs (no dates, fixed ids)
