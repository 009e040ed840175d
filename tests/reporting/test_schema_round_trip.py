"""opgate.reporting.schema: every shipped verb's report encodes to a schema-2 document and decodes to a report
that encodes to the same document (doctor, verify, inspect and analyze from their recorded reports; inspect
--compare, explain and the fleet merge built here from tests/data). `opgate plan` writes plans, not a RunReport."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from opgate.reporting.schema import (REPORT_SCHEMA_VERSION, decode_figure, decode_report, encode_figure,
                                     encode_report, structure_problem)
from opgate.model.results import CheckResult, Figure, Outcome, RunReport, Threshold

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
REPORTS = DATA / "reports"


def round_trips(report: RunReport) -> dict:
    """The document of `report`, after checking that it survives JSON and decodes to an equal document."""
    document = json.loads(json.dumps(encode_report(report), default=str))
    assert document["schema_version"] == REPORT_SCHEMA_VERSION and structure_problem(document) == ""
    again = decode_report(document)
    assert json.loads(json.dumps(encode_report(again), default=str)) == document
    assert [(r.check_id, r.outcome) for r in again.results] == [(r.check_id, r.outcome) for r in report.results]
    return document


@pytest.mark.parametrize("name", sorted(p.name for p in REPORTS.glob("*.json")))
def test_recorded_doctor_verify_inspect_and_analyze_reports_round_trip(name: str) -> None:
    verb = json.loads((REPORTS / name).read_text())["verb"]
    assert verb in ("doctor", "verify", "inspect", "analyze")
    document = round_trips(decode_report(json.loads((REPORTS / name).read_text())))
    assert document["verb"] == verb


def test_an_inspect_compare_report_round_trips() -> None:
    from opgate.inspect.command import resolve_targets
    from opgate.inspect.compare import compare_builds, to_run_report
    from opgate.inspect.sources import inspect_paths

    a = inspect_paths([DATA / "toolchain" / "kernels_nvcc.fatbin"], kernels=True)
    b = inspect_paths([DATA / "toolchain" / "kernels_clang.fatbin"], kernels=True)
    comparison = compare_builds("nvcc", a, "clang", b, resolve_targets("h200@580.65.06,b200@570.86.10", None))
    document = round_trips(to_run_report(comparison, "2026-01-01T00:00:00+00:00", 0.5))
    assert document["verb"] == "inspect" and document["results"]


def test_an_explain_report_round_trips() -> None:
    from opgate.gpu.explain import explain_reports, to_run_report

    csv = DATA / "ncu" / "gelu_triton_h200.csv"
    document = round_trips(to_run_report(explain_reports([csv]), [csv]))
    assert document["verb"] == "explain" and document["results"][0]["figures"]


def test_a_fleet_report_round_trips() -> None:
    """Two nodes' doctor reports (one schema 1, one schema 2) merged as `fleet.slurm merge` does."""
    from opgate.fleet.slurm import merge_reports

    report = merge_reports([REPORTS / "doctor_basic_cpu.v1.json", REPORTS / "doctor_standard_h200.v2.json"])
    document = round_trips(report)
    assert document["verb"] == "fleet doctor" and len(document["extra"]["nodes"]) == 2


@pytest.mark.parametrize("value", [True, False, None, "9.0", "sm_90", 3, 2.5, math.inf, -math.inf])
def test_a_figure_decodes_to_the_value_it_was_made_with(value: object) -> None:
    result = CheckResult("doctor.mine", "t", Outcome.PASSED, "r",
                         (Figure("fan", value, "%", Threshold(1, "<=", "a test"), key="mine.fan"),))
    figure = decode_figure(json.loads(json.dumps(encode_figure(result, result.figures[0]))))
    assert figure == result.figures[0]


def test_a_nan_figure_decodes_to_nan() -> None:
    result = CheckResult("doctor.mine", "t", Outcome.PASSED, "r", (Figure("fan", math.nan, key="mine.fan"),))
    encoded = encode_figure(result, result.figures[0])
    assert encoded["value"] is None and encoded["text"] == "nan"
    assert math.isnan(decode_figure(json.loads(json.dumps(encoded))).value)  # type: ignore[arg-type]


def test_another_schema_version_is_refused() -> None:
    with pytest.raises(ValueError, match="schema version 3"):
        decode_report({"schema_version": 3, "verb": "doctor", "results": [], "started_at": "", "duration_s": 0})
