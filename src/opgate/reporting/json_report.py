"""`--json PATH`: the whole RunReport, versioned, written atomically."""

from __future__ import annotations

import json
from pathlib import Path

from opgate.reporting.atomic import write_atomically
from opgate.results import RunReport


def render_json(report: RunReport) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=False, default=str) + "\n"


def write_json(report: RunReport, path: Path) -> None:
    write_atomically(path, render_json(report))


def read_json(path: Path) -> RunReport:
    return RunReport.from_dict(json.loads(Path(path).read_text()))
