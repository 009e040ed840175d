"""`--html PATH`: one self-contained page (inline CSS and SVG, no script from anywhere, no network).

Summary first (verdict, counts, what failed and why, how to replay it), then the charts, then the verb's own
sections if it registers any (opgate.reporting.renderers), then every check with its evidence table (schema-2 key and labels beside the prose name, thresholds with their sources).
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from opgate.engine.atomic import write_atomically
from opgate.reporting.metrics import metric_for
from opgate.reporting.renderers import HtmlSection, renderers_for
from opgate.reporting.replay import replay_command
from opgate.model.results import CheckResult, Outcome, RunReport

CSS = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1b1b1b;background:#fafafa}
main{max-width:1200px;margin:0 auto;padding:12px 20px}
h1{font-size:20px;margin:6px 0} h2{font-size:17px;margin:18px 0 6px} h3{font-size:15px;margin:0}
.verdict{display:inline-block;padding:3px 10px;border-radius:4px;color:#fff;font-weight:600}
.v-pass{background:#2e7d32}.v-fail{background:#c62828}.v-input{background:#6a1b9a}.v-error{background:#6a1b9a}
.counts span{margin-right:12px}.meta{color:#555;font-size:12px}
.problem{border-left:4px solid #c62828;background:#fff;padding:6px 10px;margin:6px 0}
.problem.warned{border-color:#f9a825}.problem.error{border-color:#6a1b9a}
code,pre{font:12px/1.35 ui-monospace,Menlo,Consolas,monospace;background:#f0f0f0;padding:1px 4px;border-radius:3px}
pre{padding:6px;overflow-x:auto;white-space:pre-wrap}
.problem,.problem code,details.check summary,td{overflow-wrap:anywhere;word-break:break-word}
.outcome{font-weight:600;text-transform:uppercase;font-size:12px}
.o-passed{color:#2e7d32}.o-failed{color:#c62828}.o-warned{color:#b07d00}.o-skipped{color:#777}.o-error{color:#6a1b9a}
table{border-collapse:collapse;width:100%;background:#fff;font-size:12px;margin:4px 0 10px}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top} th{background:#f3f3f3}
details.check{background:#fff;border:1px solid #ddd;border-radius:4px;margin:6px 0;padding:4px 8px}
details.check summary{cursor:pointer}
figure{margin:8px 0;background:#fff;border:1px solid #ddd;border-radius:4px;padding:6px;display:inline-block;vertical-align:top}
figcaption{font-size:12px;color:#444;max-width:640px}
svg .title{font-size:13px;font-weight:600} svg .tick{font-size:10px;fill:#333} svg .axis{font-size:11px;fill:#333}
svg .cell{font-size:10px;fill:#fff;font-weight:600} svg .frame{fill:none;stroke:#999}
svg .grid{stroke:#e5e5e5} svg .ref{stroke:#c62828;stroke-width:1.5;stroke-dasharray:4 3}
"""


def _verdict(report: RunReport) -> tuple[str, str]:
    code = int(report.exit_code)
    return {0: ("PASSED", "v-pass"), 1: ("FAILED", "v-fail"), 2: ("BAD INPUT", "v-input"),
            130: ("INTERRUPTED", "v-error")}.get(code, ("INCOMPLETE", "v-error"))  # as the Markdown summary says


def _fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _summary(report: RunReport) -> str:
    word, css = _verdict(report)
    counts = report.counts()
    host = report.host or {}
    out = [f'<section id="summary"><h1>opgate {escape(report.verb)} '
           f'<span class="verdict {css}" id="verdict">{word}</span></h1>',
           '<div class="counts">' + "".join(f'<span class="o-{k}">{n} {k}</span>' for k, n in counts.items() if n)
           + f'<span>exit code {int(report.exit_code)}</span></div>',
           f'<div class="meta">{escape(str(host.get("hostname", "")))} · {escape(str(host.get("platform", "")))} · '
           f'started {escape(report.started_at)} · {report.duration_s:.1f}s · opgate {escape(report.tool_version)}'
           + (" · --strict" if report.strict else "") + "</div>"]
    for error in report.input_errors:
        out.append(f'<div class="problem error"><b>input could not be read</b>: {escape(error)}</div>')
    problems = [r for r in report.results if r.outcome in (Outcome.FAILED, Outcome.ERROR, Outcome.WARNED)]
    problems.sort(key=lambda r: {Outcome.FAILED: 0, Outcome.ERROR: 1, Outcome.WARNED: 2}[r.outcome])
    if problems:
        out.append("<h2>What failed and why</h2>" if any(r.outcome is not Outcome.WARNED for r in problems)
                   else "<h2>What warned and why</h2>")
    else:
        out.append('<p id="no-problems">Every check passed or was skipped with its reason.</p>')
    for index, result in enumerate(problems):
        anchor = _anchor(result)
        out.append(f'<div class="problem {result.outcome.value}" id="problem-{index}" data-check="'
                   f'{escape(result.check_id)}"><span class="outcome o-{result.outcome.value}">'
                   f'{result.outcome.value}</span> <a href="#{anchor}"><b>{escape(result.check_id)}</b></a>: '
                   f'{escape(result.reason)}')
        if result.remediation:
            out.append(f"<br>→ {escape(result.remediation)}")
        out.append(f"<br>replay: <code>{escape(replay_command(report, result))}</code></div>")
    out.append("</section>")
    return "".join(out)


def _anchor(result: CheckResult) -> str:
    return "check-" + "".join(c if c.isalnum() else "-" for c in result.check_id)


def _evidence_table(result: CheckResult) -> str:
    if not result.figures:
        return "<p>(no figures)</p>"
    rows = ["<table><tr><th>figure</th><th>value</th><th>unit</th><th>threshold</th><th>key</th><th>labels</th>"
            "</tr>"]
    for figure in result.figures:
        metric = metric_for(result, figure)
        threshold = ""
        if figure.threshold:
            threshold = (f"{escape(figure.threshold.comparison)} {escape(_fmt_value(figure.threshold.value))}"
                         f'<br><span class="meta">{escape(figure.threshold.source)}</span>')
        rows.append(f"<tr><td>{escape(figure.name)}</td><td>{escape(_fmt_value(figure.value))}</td>"
                    f"<td>{escape(figure.unit)}</td><td>{threshold}</td><td><code>{escape(metric.key)}</code></td>"
                    f"<td>{escape(metric.label_text())}</td></tr>")
    rows.append("</table>")
    return "".join(rows)


def _check_section(report: RunReport, result: CheckResult) -> str:
    is_problem = result.outcome in (Outcome.FAILED, Outcome.ERROR, Outcome.WARNED)
    body = [f'<details class="check" id="{_anchor(result)}"' + (" open" if is_problem else "") + ">",
            f'<summary><span class="outcome o-{result.outcome.value}">{result.outcome.value}</span> '
            f"<b>{escape(result.check_id)}</b> — {escape(result.reason)} "
            f'<span class="meta">({result.duration_s:.2f}s)</span></summary>',
            _evidence_table(result)]
    if result.remediation:
        body.append(f"<p>→ {escape(result.remediation)}</p>")
    if is_problem:
        body.append(f"<p>replay: <code>{escape(replay_command(report, result))}</code></p>")
    body.append("</details>")
    return "".join(body)


def html_sections(report: RunReport) -> list[HtmlSection]:
    """The verb's own sections, between the charts and the checks (opgate.reporting.renderers); none by default."""
    own = renderers_for(report.verb).html_sections
    return own(report) if own is not None else []


def render_html(report: RunReport) -> str:
    from opgate.reporting.charts import charts_for

    charts = charts_for(report)
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
             "style-src 'unsafe-inline'; img-src data:\">",
             f"<title>opgate {escape(report.verb)}: {_verdict(report)[0]}</title><style>{CSS}</style></head>",
             "<body><main>", _summary(report)]
    if charts:
        parts.append('<section id="charts"><h2>Charts</h2>')
        for chart_id, caption, svg in charts:
            parts.append(f'<figure id="{escape(chart_id)}">{svg}<figcaption>{escape(caption)}</figcaption></figure>')
        parts.append("</section>")
    for section_id, heading, body in html_sections(report):
        parts.append(f'<section id="{escape(section_id)}"><h2>{escape(heading)}</h2>{body}</section>')
    parts.append(f'<section id="checks"><h2>Checks ({len(report.results)})</h2>')
    order = {Outcome.FAILED: 0, Outcome.ERROR: 1, Outcome.WARNED: 2, Outcome.PASSED: 3, Outcome.SKIPPED: 4}
    for result in sorted(report.results, key=lambda r: order[r.outcome]):
        parts.append(_check_section(report, result))
    parts.append("</section></main></body></html>\n")
    return "\n".join(parts)


def write_html(report: RunReport, path: Path) -> None:
    write_atomically(path, render_html(report))
