"""opgate.reporting.renderers: each verb's own rendering comes from the renderers its package registers under the
`opgate.report.renderers` entry points (a third-party verb's too), and no reporter branches on the verb."""

from __future__ import annotations

import ast
import io
from pathlib import Path
from typing import Iterator

import pytest
from rich.console import Console

from opgate.reporting import renderers
from opgate.reporting.renderers import GENERIC, MarkdownTable, VerbRenderers, renderers_for
from opgate.model.results import CheckResult, Figure, Outcome, RunReport, Threshold

SRC = Path(__file__).resolve().parents[2] / "src" / "opgate"


@pytest.mark.parametrize("verb", ["doctor", "verify", "inspect", "analyze", "fleet doctor"])
def test_every_shipped_verb_registers_its_renderers(verb: str) -> None:
    found = renderers_for(verb)
    assert isinstance(found, VerbRenderers) and found is not GENERIC


def test_a_verb_without_renderers_gets_the_generic_rendering() -> None:
    assert renderers_for("explain") is GENERIC


def terminal(report: RunReport, console: Console, verbose: bool) -> None:
    console.print(f"my summary of {len(report.results)} result(s), verbose={verbose}")


MY_RENDERERS = VerbRenderers(
    terminal=terminal,
    charts=lambda report: [("chart-mine", "my chart", "<svg id='svg-mine'></svg>")],
    html_sections=lambda report: [("my-section", "My section", "<p id='mine'>hello</p>")],
    markdown_table=lambda report: MarkdownTable(("| mine |", "| --- |"), ("| row |",), carries_reasons=False),
    history_subject=lambda report: "my subject",
    replay_command=lambda report, result: f"mytool --again {result.check_id}",
)


@pytest.fixture()
def third_party(monkeypatch: pytest.MonkeyPatch) -> Iterator[RunReport]:
    """A plugin's verb `mytool`, declared in the renderers' entry-point group as a package would declare it."""
    declared = {"mytool": "mytool_plugin.report:RENDERERS"}
    monkeypatch.setattr(renderers, "entry_points", lambda group: declared if group == renderers.RENDERERS_GROUP
                        else {})
    monkeypatch.setattr(renderers, "load", lambda target: MY_RENDERERS)
    renderers_for.cache_clear()
    results = (CheckResult("mytool.a", "a", Outcome.FAILED, "too hot", (Figure("t", 90, "C", Threshold(80, "<=", "x"),
                                                                                key="mytool.t"),)),
               CheckResult("mytool.b", "b", Outcome.SKIPPED, "no fan"))
    yield RunReport("mytool", results, "2026-01-01T00:00:00+00:00", 1.0, host={"hostname": "h"})
    renderers_for.cache_clear()


def test_a_third_party_verb_renders_through_its_registered_renderers(third_party: RunReport) -> None:
    from opgate.reporting.charts import charts_for
    from opgate.reporting.history import subject_of
    from opgate.reporting.html import render_html
    from opgate.reporting.markdown import render_markdown
    from opgate.reporting.replay import replay_command
    from opgate.reporting.terminal import render_summary

    report = third_party
    assert renderers_for("mytool") is MY_RENDERERS
    assert [chart_id for chart_id, _, _ in charts_for(report)] == ["chart-mine"]
    page = render_html(report)
    assert "svg-mine" in page and 'id="my-section"' in page and "chart-bands" not in page
    assert page.index("my-section") < page.index('id="checks"')
    summary = render_markdown(report)
    assert "| row |" in summary and "### Skipped" in summary and "mytool --again mytool.a" in summary
    assert subject_of(report) == "my subject"
    assert replay_command(report, report.results[0]) == "mytool --again mytool.a"
    out = io.StringIO()
    render_summary(report, Console(file=out, width=100), verbose=True)
    assert out.getvalue() == "my summary of 2 result(s), verbose=True\n"


def test_a_registration_that_is_not_verb_renderers_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(renderers, "entry_points", lambda group: {"broken": "x:Y"})
    monkeypatch.setattr(renderers, "load", lambda target: object())
    renderers_for.cache_clear()
    try:
        with pytest.raises(TypeError, match="not an opgate.reporting.renderers.VerbRenderers"):
            renderers_for("broken")
    finally:
        renderers_for.cache_clear()


def verb_branches(path: Path) -> list[str]:
    """Comparisons of a `.verb` attribute with a string (report.verb == "verify", .verb in ("a", "b"))."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        on_verb = any(isinstance(side, ast.Attribute) and side.attr == "verb" for side in sides)
        strings = any(isinstance(sub, ast.Constant) and isinstance(sub.value, str)
                      for side in sides for sub in ast.walk(side))
        if on_verb and strings:
            found.append(f"line {node.lineno}")
    return found


@pytest.mark.parametrize("path", sorted((SRC / "reporting").glob("*.py")), ids=lambda p: p.name)
def test_no_reporter_branches_on_the_verb(path: Path) -> None:
    """What a verb shows its own way comes from its renderers, not from a branch in the reporter."""
    assert verb_branches(path) == []


def test_the_check_finds_a_branch_on_the_verb(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f(report):\n    if report.verb == 'verify':\n        return 1\n"
                      "    return report.verb in ('a', 'b')\n")
    assert verb_branches(sample) == ["line 2", "line 4"]
