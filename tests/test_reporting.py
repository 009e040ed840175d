from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from opgate.engine.atomic import write_atomically
from opgate.reporting.json_report import read_json, write_json
from opgate.reporting.junit import render_junit, write_junit
from opgate.model.results import CheckResult, Figure, Outcome, RunReport, Threshold
from opgate.model.errors import InputError


def report(strict: bool = False) -> RunReport:
    results = tuple(
        CheckResult(f"doctor.c_{o.value}", o.value, o, f"reason {o.value} <&>",
                    figures=(Figure("x", 1.0, "s", Threshold(2, "<=", "src")),))
        for o in Outcome
    )
    return RunReport("doctor", results, "2026-11-29T00:00:00+00:00", 2.0, strict=strict)


def test_junit_parses_with_one_testcase_per_check(tmp_path: Path) -> None:
    path = tmp_path / "r.xml"
    write_junit(report(), path)
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("tests") == "5" and suite.get("failures") == "1" and suite.get("errors") == "1"
    assert suite.get("skipped") == "1"
    cases = suite.findall("testcase")
    assert len(cases) == 5
    by_name = {c.get("name"): c for c in cases}
    assert by_name["c_failed"].find("failure") is not None
    assert by_name["c_error"].find("error") is not None
    assert by_name["c_skipped"].find("skipped") is not None
    assert "reason failed <&>" in by_name["c_failed"].find("failure").get("message")


def test_junit_strict_turns_warnings_into_failures() -> None:
    suite = ET.fromstring(render_junit(report(strict=True))).find("testsuite")
    assert suite.get("failures") == "2"


def test_json_report_round_trips(tmp_path: Path) -> None:
    """Read back and written again, a report is the same document: its figures now carry the keys and labels
    written with them (schema 2), which the report built in memory left to the writer to derive."""
    path, again = tmp_path / "r.json", tmp_path / "again.json"
    write_json(report(), path)
    back = read_json(path)
    write_json(back, again)
    assert json.loads(again.read_text()) == json.loads(path.read_text())
    assert [r.reason for r in back.results] == [r.reason for r in report().results]
    assert json.loads(path.read_text())["exit_code"] == 1


def test_atomic_write_leaves_old_file_and_no_temp_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.json"
    path.write_text("old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_atomically(path, "new")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_atomic_write_into_missing_folder_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        write_atomically(tmp_path / "nope" / "r.json", "x")


def test_report_files_get_ordinary_permissions(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    write_json(report(), path)
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask


def test_input_errors_make_exit_code_2_in_the_report() -> None:
    from dataclasses import replace

    data = replace(report(), input_errors=("x.so: not an ELF",)).to_dict()
    assert data["exit_code"] == 2 and data["input_errors"] == ["x.so: not an ELF"]
    assert RunReport.from_dict(data).exit_code == 2
