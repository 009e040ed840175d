"""`--junit PATH`: one testcase per check, so any CI system shows opgate's verdicts."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from opgate.engine.atomic import write_atomically
from opgate.model.results import CheckResult, Outcome, RunReport


def _details(result: CheckResult) -> str:
    lines = [result.reason]
    for figure in result.figures:
        line = f"{figure.name}: {figure.value} {figure.unit}".rstrip()
        if figure.threshold:
            line += f" (threshold {figure.threshold.comparison} {figure.threshold.value}; {figure.threshold.source})"
        lines.append(line)
    if result.remediation:
        lines.append(f"remediation: {result.remediation}")
    return "\n".join(lines)


def render_junit(report: RunReport) -> str:
    counts = report.counts()
    suite = ET.Element(
        "testsuite",
        name=f"opgate.{report.verb}",
        tests=str(len(report.results)),
        failures=str(counts["failed"] + (counts["warned"] if report.strict else 0)),
        errors=str(counts["error"]),
        skipped=str(counts["skipped"]),
        time=f"{report.duration_s:.3f}",
        timestamp=report.started_at,
    )
    for result in report.results:
        classname, _, name = result.check_id.rpartition(".")
        case = ET.SubElement(suite, "testcase", classname=classname or report.verb, name=name or result.check_id,
                             time=f"{result.duration_s:.3f}")
        text = _details(result)
        if result.outcome is Outcome.FAILED or (report.strict and result.outcome is Outcome.WARNED):
            ET.SubElement(case, "failure", message=result.reason, type=result.outcome.value).text = text
        elif result.outcome is Outcome.ERROR:
            ET.SubElement(case, "error", message=result.reason, type="error").text = text
        elif result.outcome is Outcome.SKIPPED:
            ET.SubElement(case, "skipped", message=result.reason)
        else:
            ET.SubElement(case, "system-out").text = text
    tree = ET.ElementTree(ET.Element("testsuites"))
    tree.getroot().append(suite)
    ET.indent(tree)
    return ET.tostring(tree.getroot(), encoding="unicode", xml_declaration=True) + "\n"


def write_junit(report: RunReport, path: Path) -> None:
    write_atomically(path, render_junit(report))
