"""The charts of an HTML report, from the report alone (no live GPU, no re-run).

A verb's own charts (verify's error and runtime charts, inspect's verdict matrix, analyze's occupancy curves) are
its `VerbRenderers.charts` (opgate.reporting.renderers), built in its package from the helpers here; a verb that
registers none gets every figure that has a numeric threshold drawn against it (`threshold_band_charts`). A chart
whose data the run did not produce is simply absent.
"""

from __future__ import annotations

import math
import re
from typing import Any

from opgate.reporting.metrics import metric_for
from opgate.reporting.renderers import Chart, renderers_for
from opgate.reporting.svg import Band, band_chart
from opgate.model.results import CheckResult, RunReport

_DIMS = re.compile(r"([A-Za-z_]\w*)=(\d+)")


def first_figure_labels(result: CheckResult) -> dict[str, str]:
    """The schema-2 labels of a result's first figure ({} without figures): what it judged (op, impl, dtype...)."""
    if not result.figures:
        return {}
    return dict(metric_for(result, result.figures[0]).labels)


def size_of(case_label: str) -> int | None:
    """The number of elements a case label's sizes name ("M=64,N=17 seed=3" -> 1088), None without sizes."""
    sizes = [int(v) for _, v in _DIMS.findall(case_label.split(" seed=")[0])]
    return math.prod(sizes) if sizes else None


def as_float(value: Any) -> float | None:
    """A finite float, or None for what is not one."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def figure_value(result: CheckResult, name: str) -> Any:
    """The value of the figure named `name`, None when the result has none."""
    return next((f.value for f in result.figures if f.name == name), None)


def _passes(value: float, comparison: str, threshold: float) -> bool:
    return {">=": value >= threshold, "<=": value <= threshold, ">": value > threshold, "<": value < threshold,
            "==": value == threshold}.get(comparison, True)


def threshold_band_charts(report: RunReport) -> list[Chart]:
    """Every numeric figure that has a numeric threshold, against that threshold (the doctor's per-GPU bands)."""
    bands = []
    for result in report.results:
        for figure in result.figures:
            if figure.threshold is None:
                continue
            value, limit = as_float(figure.value), as_float(figure.threshold.value)
            if value is None or limit is None or isinstance(figure.value, bool):
                continue
            label = f"{result.check_id.split('.', 1)[-1]}: {figure.name}"
            bands.append(Band(label, value, limit, figure.threshold.comparison,
                              _passes(value, figure.threshold.comparison, limit), figure.unit))
    if not bands:
        return []
    return [("chart-bands", "Measured figures against their per-GPU bands (marker: the threshold; red: outside)",
             band_chart("Figures vs thresholds", bands, chart_id="svg-bands"))]


def charts_for(report: RunReport) -> list[Chart]:
    """The report's charts: its verb's own (opgate.reporting.renderers), else the figures against thresholds."""
    return (renderers_for(report.verb).charts or threshold_band_charts)(report)
