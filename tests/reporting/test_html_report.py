"""The HTML report: self-contained, and in a real headless Chromium: no console error, every chart drawn,
the first failing check visible without scrolling."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from opgate.reporting.browser import browser_missing, headless_chromium, page_facts
from opgate.reporting.html import render_html, write_html
from opgate.reporting.json_report import read_json

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "tests" / "data" / "reports"
EXAMPLES = {  # recorded real runs -> the charts their page must draw
    "doctor_basic_cpu.v1.json": set(),
    "inspect_fleet.v1.json": {"svg-fleet"},
    "verify_softmax_quick_cpu.v2.json": {"svg-error-float32", "svg-error-float16", "svg-error-bfloat16"},
    "verify_softmax_bugs_cpu.v2.json": {"svg-error-float32", "svg-error-float16"},
    "analyze_ops.v1.json": {"svg-bands"},
}


def test_page_is_self_contained_and_summary_comes_first() -> None:
    for name in EXAMPLES:
        page = render_html(read_json(REPORTS / name))
        assert not re.search(r"<script|<link|@import|url\(|src=\"http", page), name  # nothing fetched
        assert page.index('id="summary"') < page.index('id="checks"'), name
    failing = render_html(read_json(REPORTS / "inspect_fleet.v1.json"))
    assert "What failed and why" in failing and "replay: <code>opgate inspect" in failing


def test_verify_failure_shows_the_replay_token() -> None:
    page = render_html(read_json(REPORTS / "verify_softmax_bugs_cpu.v2.json"))
    assert re.search(r"--replay ogv1\.", page)
    assert 'class="fail-mark"' in page  # failed cases marked on the error-vs-size chart


@pytest.mark.skipif(browser_missing() is not None, reason=f"headless browser: {browser_missing()}")
def test_reports_render_in_headless_chromium(tmp_path: Path) -> None:
    pages = {}
    for name in EXAMPLES:
        html = tmp_path / (name.split(".")[0] + ".html")
        write_html(read_json(REPORTS / name), html)
        pages[name] = html
    leftovers = set(Path(tempfile.gettempdir()).glob("org.chromium.Chromium.*"))
    with headless_chromium() as driver:
        for name, html in pages.items():
            facts = page_facts(driver, html)
            errors = [entry for entry in facts.console if entry.get("level") in ("SEVERE", "ERROR")]
            assert not errors, (name, errors)
            drawn = {c["id"] for c in facts.charts}
            assert EXAMPLES[name] <= drawn, (name, drawn)
            for chart in facts.charts:
                assert chart["drawn"] > 3 and chart["width"] > 100 and chart["height"] > 50, (name, chart)
            report = read_json(REPORTS / name)
            if any(r.outcome.value in ("failed", "error", "warned") for r in report.results):
                assert facts.first_problem_top is not None, name
                assert facts.first_problem_top < facts.viewport_height, (name, facts.first_problem_top)
    # the browser's temporary folders went with it (they used to stay in /tmp, one per run)
    assert set(Path(tempfile.gettempdir()).glob("org.chromium.Chromium.*")) <= leftovers


def test_verify_runtime_and_doctor_band_charts_draw_from_the_judging_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here: the runtime stage's figure layout (opgate.verify.runtime) with chosen INPUT values, and the
    doctor's GPU probes run through their judging layer with tests/doctor's chosen inputs, must chart."""
    import sys

    from opgate.model.results import CheckResult, Figure, Outcome, RunReport

    runtime = [CheckResult(f"verify.softmax.{impl}.runtime", "t", Outcome.PASSED, "r", (
        Figure("median time", median, "us"), Figure("p95 time", median * 1.1, "us"),  # INPUT values
        Figure("achieved fraction of the roofline floor", fraction), Figure("arithmetic intensity", 0.6, "FLOP/byte")),
        extra={"implementation": impl, "dtype": "float16"}) for impl, median, fraction in
        (("triton", 80.0, 0.85), ("torch", 120.0, 0.57))]
    page = render_html(RunReport("verify", tuple(runtime), "2026-01-01T00:00:00+00:00", 1.0))
    assert 'id="svg-runtime"' in page and 'id="svg-roofline"' in page

    sys.path.insert(0, str(ROOT / "tests" / "doctor"))
    import test_gpu_probe_verdicts as probes  # noqa: E402

    from opgate.doctor import gpu_checks
    from opgate.gpu.probes import bandwidth, device

    monkeypatch.setattr(device, "gpu_unavailable_reason", lambda: None)
    monkeypatch.setattr(device, "device_count", lambda: 1)
    monkeypatch.setattr(bandwidth, "measure_hbm", lambda dev, **kw: probes.hbm(3.00, 4.31, 4.30))  # INPUT: slow
    result = probes.run(gpu_checks.HbmBandwidthCheck)
    page = render_html(RunReport("doctor", (result,), "2026-01-01T00:00:00+00:00", 1.0))
    assert 'id="svg-bands"' in page and "HBM read (opgate kernel)" in page and 'id="problem-0"' in page
