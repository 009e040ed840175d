"""`--json PATH`: the whole RunReport as its schema-2 document (`opgate.reporting.schema`), written atomically;
and the reading of such a file, which refuses a missing, foreign or damaged one with an InputError.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opgate.engine.atomic import write_atomically
from opgate.model.errors import InputError
from opgate.reporting.schema import READABLE_SCHEMAS, decode_report, encode_report, structure_problem
from opgate.model.results import RunReport


def render_json(report: RunReport) -> str:
    return json.dumps(encode_report(report), indent=2, sort_keys=False, default=str) + "\n"


def write_json(report: RunReport, path: Path) -> None:
    write_atomically(path, render_json(report))


def read_json(path: Path) -> RunReport:
    return decode_report(read_report_dict(path))


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
    problem = structure_problem(data)
    if problem:
        raise InputError(f"report {path} is damaged: {problem}; pass a file opgate ... --json wrote, unedited")
    return data
