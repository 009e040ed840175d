"""docs/benchmarks.md is rendered from benchmarks/results/*.json by scripts/render_benchmarks.py and must match it.

The records are read with the script's own loader (imported from its file: scripts/ is no package); the script
itself runs as a child, as a person or CI would run it. No torch, nothing slow.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import pytest

from opgate_testing import REPO, script_module

SCRIPT = REPO / "scripts" / "render_benchmarks.py"
RESULTS = REPO / "benchmarks" / "results"


def render_module() -> ModuleType:
    return script_module(SCRIPT, "render_benchmarks")


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO)


def test_the_committed_document_is_what_the_records_render() -> None:
    result = run_script("--check")
    assert result.returncode == 0, result.stderr
    module = render_module()
    assert (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8") == \
        module.render(module.load_records(RESULTS))


def test_every_record_has_a_command_a_date_and_its_own_section() -> None:
    module = render_module()
    records = module.load_records(RESULTS)
    assert len(records) == len(list(RESULTS.glob("*.json")))
    document = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    for record in records:
        assert record.commands and all(command.strip() for command in record.commands), record.name
        assert "2026-11-01" <= record.date <= datetime.date.today().isoformat(), record.name  # a measured date
        assert f"### {record.title}\n" in document
        assert f"`benchmarks/results/{record.name}.json`" in document


def test_the_check_fails_in_one_line_when_the_document_is_stale(tmp_path: Path) -> None:
    stale = tmp_path / "benchmarks.md"
    stale.write_text("# an old diary\n", encoding="utf-8")
    result = run_script("--check", "--output", str(stale))
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "render_benchmarks.py" in result.stderr
    assert stale.read_text(encoding="utf-8") == "# an old diary\n"


def good_record() -> dict[str, Any]:
    return {"schema": 1, "group": "tests", "title": "A subject", "date": "2026-12-02", "machine": "2-core CPU",
            "commands": ["make test"], "shows": "What it shows.",
            "table": {"columns": ["run", "seconds"], "rows": [["first", "1.0"]]}}


@pytest.mark.parametrize("damage, problem", [
    pytest.param(lambda r: r["table"]["rows"].append(["second"]), "table row 2 has 1 cells for 2 columns",
                 id="short-row"),
    pytest.param(lambda r: r.pop("commands"), "missing key(s) commands", id="no-command"),
    pytest.param(lambda r: r.update(date="2 December 2026"), "is not an ISO date", id="bad-date"),
    pytest.param(lambda r: r.update(colour="blue"), "unknown key(s) colour", id="unknown-key"),
    pytest.param(lambda r: r.update(group="misc"), "group 'misc' is not one of", id="unknown-group"),
])
def test_a_malformed_record_exits_2_naming_the_file_and_the_problem(
        tmp_path: Path, damage: Callable[[dict[str, Any]], object], problem: str) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "good.json").write_text(json.dumps(good_record()), encoding="utf-8")
    bad = good_record()
    damage(bad)
    (results / "bad.json").write_text(json.dumps(bad), encoding="utf-8")
    output = tmp_path / "benchmarks.md"
    result = run_script("--results", str(results), "--output", str(output))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "bad.json" in lines[0] and problem in lines[0]
    assert not output.exists()


def test_a_record_that_is_not_json_exits_2(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text("{ not json", encoding="utf-8")
    result = run_script("--results", str(tmp_path), "--output", str(tmp_path / "out.md"))
    assert result.returncode == 2
    assert "broken.json: not valid JSON" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_rendering_writes_the_document_and_escapes_table_pipes(tmp_path: Path) -> None:
    record = good_record()
    record["table"]["rows"] = [["a | b", "2"]]
    (tmp_path / "one.json").write_text(json.dumps(record), encoding="utf-8")
    output = tmp_path / "benchmarks.md"
    result = run_script("--results", str(tmp_path), "--output", str(output))
    assert result.returncode == 0, result.stderr
    text = output.read_text(encoding="utf-8")
    assert "| a \\| b | 2 |" in text and "git log -p docs/benchmarks.md" in text
    assert "- [A subject](#a-subject) (2026-12-02)" in text
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
