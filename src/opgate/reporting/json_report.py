"""`--json PATH`: the whole RunReport, versioned, written atomically.

Schema 2 (what opgate writes) adds to every figure a stable `key`, `labels`, a numeric `value` (or None with
an explicit `text`) and keeps the prose `name` (see `opgate.reporting.metrics`). Schema 1 files, written by
earlier releases, still load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from opgate.atomic_file import write_atomically
from opgate.errors import InputError
from opgate.reporting.metrics import figure_to_v2
from opgate.results import SCHEMA_VERSION as SCHEMA_V1
from opgate.results import Outcome, RunReport

REPORT_SCHEMA_VERSION = 2
READABLE_SCHEMAS = (SCHEMA_V1, REPORT_SCHEMA_VERSION)


def report_to_dict(report: RunReport) -> dict[str, Any]:
    """The schema-2 document of a report."""
    data = report.to_dict()
    data["schema_version"] = REPORT_SCHEMA_VERSION
    results = []
    for result, encoded in zip(report.results, data["results"]):
        encoded["figures"] = [figure_to_v2(result, figure) for figure in result.figures]
        results.append(encoded)
    data["results"] = results
    return data


def report_from_dict(data: Mapping[str, Any]) -> RunReport:
    """A RunReport from a schema-1 or schema-2 document (`RunReport.from_dict` decodes both)."""
    return RunReport.from_dict(data)


def render_json(report: RunReport) -> str:
    return json.dumps(report_to_dict(report), indent=2, sort_keys=False, default=str) + "\n"


def write_json(report: RunReport, path: Path) -> None:
    write_atomically(path, render_json(report))


def read_json(path: Path) -> RunReport:
    return report_from_dict(read_report_dict(path))


def read_report_dict(path: Path) -> dict[str, Any]:
    """The raw document of an opgate JSON report; a missing or foreign file is an InputError."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"report {path} does not exist; pass a file written by opgate ... --json") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"report {path} is not readable JSON ({exc}); pass a file written by opgate --json") from None
    if not isinstance(data, dict) or data.get("tool") != "opgate" or data.get("schema_version") not in READABLE_SCHEMAS:
        version = data.get("schema_version") if isinstance(data, dict) else None
        raise InputError(f"report {path} is not an opgate report of schema {READABLE_SCHEMAS} (schema_version "
                         f"{version!r}); read it with the opgate release that wrote it")
    problem = _structure_problem(data)
    if problem:
        raise InputError(f"report {path} is damaged: {problem}; pass a file opgate ... --json wrote, unedited")
    return data


OUTCOMES = frozenset(outcome.value for outcome in Outcome)


def _structure_problem(data: dict[str, Any]) -> str:
    """What is wrong with the fields every reader relies on ("" when nothing is): a hand-edited or truncated
    report was a traceback in `opgate diff`."""
    if not isinstance(data.get("verb"), str):
        return "it has no 'verb'"
    results = data.get("results")
    if not isinstance(results, list):
        return f"'results' is {type(results).__name__}, not a list"
    for index, result in enumerate(results):
        if not isinstance(result, dict):
            return f"results[{index}] is {type(result).__name__}, not an object"
        for key in ("check_id", "outcome"):
            if not isinstance(result.get(key), str):
                return f"results[{index}] has no {key!r}"
        if result["outcome"] not in OUTCOMES:
            return f"results[{index}] has outcome {result['outcome']!r}, not one of {', '.join(sorted(OUTCOMES))}"
    return ""
