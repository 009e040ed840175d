"""The Markdown summary (--markdown): built from the report model, readable as GitHub-flavoured Markdown (parsed
here with markdown-it-py, which rich already brings), replay commands on lines of their own, and never over the
size GitHub accepts for a step summary, however many checks a run has."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from opgate_testing import REPO

from opgate.reporting.json_report import read_json
from opgate.reporting.markdown import MAX_BYTES, render_markdown, write_markdown
from opgate.model.results import CheckResult, Outcome, RunReport

markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py (a dependency of rich) parses the summary")

REPORTS = REPO / "tests" / "data" / "reports"
SPEC = "tests/data/verify/softmax_spec.py"


def to_html(text: str) -> str:
    return markdown_it.MarkdownIt("commonmark").enable("table").render(text)


def table_rows(html: str) -> list[list[str]]:
    """Each body row of the first table as its cells' text (tags stripped)."""
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [[re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


def code_blocks(html: str) -> list[str]:
    return [block.strip() for block in re.findall(r'<pre><code class="language-sh">(.*?)</code></pre>', html, re.S)]


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """A real `opgate verify` on CPU: a correct and a buggy implementation, numerics only, quick budget."""
    out = tmp_path_factory.mktemp("markdown")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run([sys.executable, "-m", "opgate", "verify", SPEC, "--budget", "quick", "--stages", "numerics",
                           "--no-extras", "--dtype", "float32", "--impl", "torch", "--impl", "triton_tail_bug",
                           "--json", str(out / "report.json"), "--markdown", str(out / "summary.md"),
                           "--out", str(out / "artefacts")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    return proc, out


@pytest.mark.slow
def test_a_real_failing_verify_run_summarises_verdicts_reasons_and_replay(failing_run) -> None:
    proc, out = failing_run
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"Markdown summary: {out / 'summary.md'}" in proc.stdout
    text = (out / "summary.md").read_text()
    report = read_json(out / "report.json")
    assert text == render_markdown(report)  # rendered from the report model, the JSON's twin
    assert text.startswith("## opgate verify: FAILED\n") and "**Exit code 1**: a check failed" in text

    html = to_html(text)
    rows = {(row[0], row[1], row[2]): row[3] for row in table_rows(html)}
    assert rows == {("softmax", "all", "—"): "PASS", ("softmax", "torch", "float32"): "PASS",
                    ("softmax", "triton_tail_bug", "float32"): "FAIL"}

    failed = next(r for r in report.results if r.outcome is Outcome.FAILED)
    token = failed.extra["replay"]
    assert code_blocks(html) == [f"opgate verify {SPEC} --replay {token}"]  # a line to copy, whole
    assert "; replay:" in failed.reason and "; replay:" not in text  # the reason's own tail is not repeated
    assert failed.remediation.split(";")[0].replace("<", "&lt;") in html  # the remedy, escaped


def test_doctor_summary_is_one_row_per_check_with_its_reason() -> None:
    report = read_json(REPORTS / "doctor_basic_cpu.v1.json")
    html = to_html(render_markdown(report))
    rows = table_rows(html)
    assert [row[0] for row in rows] == [r.check_id for r in report.results]
    assert {row[1] for row in rows} == {"PASS", "SKIP"}
    assert "Skipped" not in html and "<h3>" not in html  # the table carries every skip reason; nothing failed


def test_verify_summary_groups_stages_and_lists_skips_and_warnings() -> None:
    text = render_markdown(read_json(REPORTS / "verify_softmax_quick_cpu.v2.json"))
    html = to_html(text)
    rows = {(row[1], row[2]): row for row in table_rows(html)}
    assert rows[("all", "—")][3:] == ["PASS", "calibration PASS, runtime SKIP, sanitizer SKIP, recovery SKIP"]
    assert rows[("onnxruntime", "float16")][3] == "SKIP" and rows[("tvm", "bfloat16")][3] == "WARN"
    assert "<h3>Warnings (2)</h3>" in html and "<h3>Skipped</h3>" in html
    assert "**Exit code 0**: every check passed" in text
    assert all(block.startswith("opgate verify examples/ops/softmax.py --replay ogv1.") for block in code_blocks(html))


def test_errors_without_a_token_replay_their_implementation_and_dtype() -> None:
    html = to_html(render_markdown(read_json(REPORTS / "verify_softmax_bugs_cpu.v2.json")))
    assert "<h3>Failures, errors and warnings (4)</h3>" in html
    assert (f"opgate verify {SPEC} --op softmax --impl triton_fp16_acc --dtype float32" in code_blocks(html))


def test_inspect_summary_replays_binary_and_target() -> None:
    html = to_html(render_markdown(read_json(REPORTS / "inspect_fleet.v1.json")))
    assert "opgate inspect tests/data/inspect/sm89.cubin --targets h100" in code_blocks(html)
    assert "<td>SASS sm_90 runs on h100 (sm_90)</td>" in html


def test_markup_in_reasons_stays_text() -> None:
    nasty = "a | b <script>alert(1)</script> *not bold* _not em_ [link](http://x) `tick` #1 sm_90"
    report = RunReport("doctor", (CheckResult("doctor.x|y", "t", Outcome.FAILED, nasty, remediation=nasty),),
                       "2026-01-01T00:00:00+00:00", 1.0)
    html = to_html(render_markdown(report))
    assert "<script" not in html and "<a " not in html and "<em>" not in html
    rows = table_rows(html)
    assert len(rows) == 1 and len(rows[0]) == 3 and rows[0][0] == "doctor.x|y"  # the pipes split no cell
    assert "a | b &lt;script&gt;" in rows[0][2] and rows[0][2].endswith("#1 sm_90")


def test_a_huge_run_is_cut_with_counts_and_stays_under_the_limit(tmp_path: Path) -> None:
    """5,000 failures with long reasons (a fleet-sized verify): every list is cut, each says how many it left out,
    and the file stays under the budget (half of GitHub's 1 MiB) and under a smaller one when asked."""
    results = tuple(CheckResult(f"verify.op{i}.triton.float16", "t", Outcome.FAILED, "x" * 3000,
                                remediation="fix it " * 200, extra={"replay": "ogv1." + "A" * 200})
                    for i in range(5000))
    report = RunReport("verify", results, "2026-01-01T00:00:00+00:00", 1.0, extra={"spec": "ops/"})
    path = tmp_path / "summary.md"
    write_markdown(report, path)
    text = path.read_text()
    assert len(text.encode()) <= MAX_BYTES
    shown_rows = len(table_rows(to_html(text)))
    assert f"… and {5000 - shown_rows} more rows left out" in text
    shown_problems = len(code_blocks(to_html(text)))
    assert 0 < shown_problems < 5000 and f"… and {5000 - shown_problems} more failures, errors and warnings" in text
    assert "x" * 1500 not in text  # one reason is cut too
    small = render_markdown(report, max_bytes=20_000)
    assert len(small.encode()) <= 20_000 and "more rows left out" in small


def test_the_json_report_and_the_summary_agree_on_the_exit_code(tmp_path: Path) -> None:
    for name in ("verify_softmax_bugs_cpu.v2.json", "inspect_fleet.v1.json", "doctor_basic_cpu.v1.json"):
        data = json.loads((REPORTS / name).read_text())
        text = render_markdown(read_json(REPORTS / name))
        assert f"**Exit code {data['exit_code']}**" in text, name


def test_gpu_stages_join_their_implementations_row() -> None:
    """A recorded H200 run: the runtime stage's result sits in the row of its implementation and dtype; each
    sanitizer tool is named in that row too."""
    rows = {(row[1], row[2]): row[3:] for row in table_rows(to_html(render_markdown(
        read_json(REPORTS / "verify_softmax_h200.v2.json"))))}
    assert rows[("triton", "float16")] == ["PASS", "numerics PASS, runtime PASS"]
    labels = {"op": "softmax", "implementation": "triton", "dtype": "float16"}
    results = [CheckResult(f"verify.softmax.triton.{tool}", "t", Outcome.PASSED, "clean", extra=labels)
               for tool in ("racecheck", "initcheck")]
    results.append(CheckResult("verify.softmax.triton.float16.sanitizer", "t", Outcome.FAILED, "1 error", extra=labels))
    html = to_html(render_markdown(RunReport("verify", tuple(results), "2026-01-01T00:00:00+00:00", 1.0)))
    assert table_rows(html) == [["softmax", "triton", "float16", "FAIL",
                                 "sanitizer:racecheck PASS, sanitizer:initcheck PASS, sanitizer:memcheck FAIL"]]
