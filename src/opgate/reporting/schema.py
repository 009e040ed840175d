"""The report document, schema 2: the one encode/decode pair of RunReport, CheckResult and Figure as `--json`
writes them and every reader takes them back (`opgate diff`, the run history, the fleet's node reports and
`fleet.slurm merge`, the exporter's /report.json). Schema-1 documents, written by earlier releases, decode too.

Why in reporting/ and not beside results.py: a figure's schema-2 key and labels come from
`opgate.reporting.metrics` (set where the figure was made, or derived there for a third-party check's keyless
figure), which the model layer may not import. `results.py` keeps the model's own plain layout
(`to_dict`/`from_dict`: the document a check's worker hands the runner, and schema 1), which needs no key.

Schema 2 adds to every figure its `key`, `labels` (the result's merged with the figure's), a numeric `value`
(None with an explicit `text` for what is not a number) and `kind`, which says how to get the value as it was
made back from `value`/`text`; the prose `name` stays.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from opgate.reporting.metrics import metric_for
from opgate.model.results import SCHEMA_VERSION as SCHEMA_V1
from opgate.model.results import CheckResult, Figure, Outcome, RunReport

REPORT_SCHEMA_VERSION = 2
READABLE_SCHEMAS = (SCHEMA_V1, REPORT_SCHEMA_VERSION)
OUTCOMES = frozenset(outcome.value for outcome in Outcome)


def encode_figure(result: CheckResult, figure: Figure) -> dict[str, Any]:
    """A figure of `result` as schema 2 writes it: the prose name beside key, labels, value, unit, text, kind."""
    metric = metric_for(result, figure)
    return {"name": figure.name, "key": metric.key, "labels": dict(metric.labels), "value": metric.value,
            "unit": figure.unit, "text": metric.text, "kind": metric.kind,
            "threshold": figure.threshold.to_dict() if figure.threshold else None}


def decode_figure(data: Mapping[str, Any]) -> Figure:
    """A Figure from a schema-2 figure (its value as made, back from value/text by `kind`) or a schema-1 one."""
    figure = Figure.from_dict(data)
    kind = data.get("kind")
    if kind == "bool":
        value: Any = data.get("text") == "true"
    elif kind in ("text", "numstr"):
        value = data.get("text")
    elif kind == "nonfinite":
        value = float(data.get("text") or "nan")
    elif kind == "none":
        value = None
    else:
        return figure
    return dataclasses.replace(figure, value=value)


def encode_result(result: CheckResult) -> dict[str, Any]:
    data = result.to_dict()
    data["figures"] = [encode_figure(result, figure) for figure in result.figures]
    return data


def decode_result(data: Mapping[str, Any]) -> CheckResult:
    result = CheckResult.from_dict({**data, "figures": ()})
    return dataclasses.replace(result, figures=tuple(decode_figure(f) for f in data.get("figures", ())))


def encode_report(report: RunReport) -> dict[str, Any]:
    """The schema-2 document of a report."""
    data = report.to_dict()
    data["schema_version"] = REPORT_SCHEMA_VERSION
    data["results"] = [encode_result(result) for result in report.results]
    return data


def decode_report(data: Mapping[str, Any]) -> RunReport:
    """A RunReport from a schema-1 or schema-2 document; another version is a ValueError naming it."""
    version = data.get("schema_version")
    if version not in READABLE_SCHEMAS:
        raise ValueError(f"report schema version {version!r} is not one of {READABLE_SCHEMAS}; read it with the "
                         "opgate release that wrote it")
    report = RunReport.from_dict({**data, "schema_version": SCHEMA_V1, "results": ()})
    return dataclasses.replace(report, results=tuple(decode_result(r) for r in data["results"]))


def structure_problem(data: Mapping[str, Any]) -> str:
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
