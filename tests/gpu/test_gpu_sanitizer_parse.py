"""compute-sanitizer reports -> findings, on report text in the documented format (tests/data/sanitizer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from opgate.gpu.probes.sanitizer import kernel_name, parse_location, parse_sanitizer_output

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "sanitizer"


def parse(name: str, tool: str = "memcheck"):
    return parse_sanitizer_output((SAMPLES / name).read_text(), tool)


def test_memcheck_out_of_bounds_write() -> None:
    report = parse("memcheck_oob_write.log")
    assert report.error_summary == 25
    writes = [f for f in report.findings if f.kind == "invalid_access"]
    assert len(writes) == 2
    first = writes[0]
    assert (first.kernel, first.file, first.line, first.pc_offset) == (
        "planted_oob_write", "/tmp/tmpd8k3q1/2d7fb1f0b6.cu", 16, "0x90")
    assert (first.access, first.size_bytes, first.memory_space) == ("write", 4, "__global__")
    assert (first.thread, first.block) == ((232, 0, 0), (3, 0, 0))
    assert first.address == "0x7f1e4fa00fa0"
    assert "out of bounds" in first.address_note and "4,000 bytes" in first.address_note
    api = [f for f in report.findings if f.kind == "api_error"]
    assert len(api) == 1 and api[0].cuda_error == 719 and api[0].api_call == "cudaDeviceSynchronize"
    assert report.reported_error_count == 25


def test_legacy_layout_with_function_after_the_line_number() -> None:
    report = parse("memcheck_legacy_layout.log")
    read, write = report.findings
    assert (read.kernel, read.function) == ("MatMulKernel", "MatMulKernel(Matrix, Matrix, Matrix)")
    assert (read.file, read.line, read.block) == ("/home/user/src/matmul.cu", 120, (4095, 0, 0))
    assert (write.kernel, write.memory_space, write.thread) == ("scale_rows", "__shared__", (31, 0, 0))


def test_racecheck_analysis_report() -> None:
    report = parse("racecheck_analysis.log", "racecheck")
    assert report.racecheck_summary == (1, 1, 0)
    (race,) = report.findings
    assert (race.kind, race.severity, race.kernel, race.line, race.hazard_count) == (
        "race", "error", "planted_shared_race", 24, 1792)
    assert any("Read access" in d for d in race.details)
    assert report.reported_error_count == 1


def test_racecheck_hazard_report_keeps_thread_block_and_severity() -> None:
    report = parse("racecheck_hazard.log", "racecheck")
    raw, war = report.findings
    assert (raw.kind, raw.severity, raw.kernel, raw.thread, raw.block, raw.address) == (
        "hazard", "error", "planted_shared_race", (32, 0, 0), (2, 0, 0), "0x80")
    assert war.severity == "warning"
    assert [f.kind for f in report.errors] == ["hazard"]
    assert report.racecheck_summary == (2, 1, 1)


def test_initcheck_uninitialized_read() -> None:
    report = parse("initcheck_uninit_read.log", "initcheck")
    assert report.error_summary == 4096
    assert {f.kind for f in report.findings} == {"uninitialized_read"}
    assert report.findings[1].thread == (1, 0, 0)
    assert report.findings[0].kernel == "planted_uninit_read"


def test_synccheck_divergent_barrier() -> None:
    report = parse("synccheck_divergent_barrier.log", "synccheck")
    assert report.error_summary == 16
    first = report.findings[0]
    assert (first.kind, first.kernel, first.function, first.line) == (
        "barrier_error", "planted_divergent_barrier", "planted_divergent_barrier(int *)", 62)


def test_clean_runs_have_no_findings() -> None:
    assert parse("clean_memcheck.log").findings == () and parse("clean_memcheck.log").error_summary == 0
    clean_race = parse("clean_racecheck.log", "racecheck")
    assert clean_race.findings == () and clean_race.reported_error_count == 0


def test_program_output_mixed_into_stdout_is_ignored() -> None:
    report = parse("stdout_mixed.log")
    (finding,) = report.findings
    assert (finding.kernel, finding.size_bytes, finding.block) == ("add_kernel", 16, (3906, 0, 0))
    assert finding.address == "0x79fd33fd0980"


def test_stream_ordered_use_after_free_is_its_own_kind() -> None:
    text = ("========= Invalid __global__ read of size 4 bytes\n"
            "=========     at planted_freed_reader+0x1a0 in k.cu:50\n"
            "=========     by thread (5,0,0) in block (1,0,0)\n"
            "=========     Address 0x7f0000001000 is a use-after-free of a stream-ordered allocation\n"
            "========= ERROR SUMMARY: 1 error\n")
    (finding,) = parse_sanitizer_output(text).findings
    assert finding.kind == "stream_ordered_race" and finding.kernel == "planted_freed_reader"


@pytest.mark.parametrize(("text", "expected"), [
    ("kern+0x70 in file.cu:12", {"kernel": "kern", "pc_offset": "0x70", "file": "file.cu", "line": 12}),
    ("void ns::kern<int>(int *, float)+0x10", {"kernel": "ns::kern<int>", "pc_offset": "0x10"}),
    ("0x70 in kern", {"kernel": "kern", "pc_offset": "0x70"}),
    ("0x278 in /p/f.cu:113:Kern(Matrix, Matrix)", {"kernel": "Kern", "file": "/p/f.cu", "line": 113}),
])
def test_location_layouts(text: str, expected: dict) -> None:
    parsed = parse_location(text)
    assert {k: parsed.get(k) for k in expected} == expected


def test_kernel_name_strips_parameters_and_return_type() -> None:
    assert kernel_name("void foo<float, 4>(float *, int)") == "foo<float, 4>"
    assert kernel_name("planted_oob_write") == "planted_oob_write"
