"""`opgate verify`'s charts in the HTML report: error against size per implementation and dtype with each case's
budget (from the numerics results' cases), and the runtime stage's median/p95 and roofline point. Registered as
verify's `VerbRenderers.charts` (opgate.verify.renderers)."""

from __future__ import annotations

from typing import Mapping

from opgate.reporting.charts import as_float, figure_value, first_figure_labels, size_of
from opgate.reporting.renderers import Chart
from opgate.reporting.svg import Point, RefLine, Series, scatter_chart
from opgate.model.results import Outcome, RunReport


def verify_charts(report: RunReport) -> list[Chart]:
    return verify_runtime_charts(report) + verify_error_charts(report)


def verify_error_charts(report: RunReport) -> list[Chart]:
    """RMSE against problem size per implementation, per dtype, the budget beside it, failures as red crosses."""
    by_dtype: dict[str, dict[str, Series]] = {}
    budgets: dict[str, dict[str, Series]] = {}
    for result in report.results:
        cases = result.extra.get("cases") if isinstance(result.extra, Mapping) else None
        if not isinstance(cases, list):
            continue
        labels = first_figure_labels(result) or {}
        dtype = str(result.extra.get("dtype") or labels.get("dtype") or "?")
        impl = str(result.extra.get("implementation") or labels.get("impl") or result.check_id)
        series = by_dtype.setdefault(dtype, {}).setdefault(impl, Series(impl))
        budget = budgets.setdefault(dtype, {}).setdefault(impl, Series(f"{impl} budget", tick=True))
        for row in cases:
            size = size_of(str(row.get("case", "")))
            outputs = row.get("outputs") or []
            if size is None or not outputs:
                continue
            rmse, limit = as_float(outputs[0].get("rmse")), as_float(outputs[0].get("rmse_budget"))
            if rmse is None:
                continue
            series.points.append(Point(size, max(rmse, 1e-12), not bool(row.get("passed", True)),
                                       f"{impl} {row.get('case')}: rmse {rmse:.3g}"
                                       + (f" (budget {limit:.3g})" if limit is not None else "")))
            if limit is not None:
                budget.points.append(Point(size, max(limit, 1e-12)))
    charts = []
    for dtype, per_impl in sorted(by_dtype.items()):
        drawn = [s for s in per_impl.values() if s.points]
        lines = [b for b in budgets.get(dtype, {}).values() if b.points]
        if not drawn:
            continue
        charts.append((f"chart-error-{dtype}", f"Error vs size, {dtype}: each dot one case, a dash the case's "
                       "RMSE budget, red crosses failed cases",
                       scatter_chart(f"RMSE vs elements ({dtype})", [*drawn, *lines], "elements (product of dims)",
                                     "RMSE", log_x=True, log_y=True, chart_id=f"svg-error-{dtype}")))
    return charts


def verify_runtime_charts(report: RunReport) -> list[Chart]:
    """Median and p95 time per implementation x dtype, and each one's point on the normalized roofline."""
    timing, roof = [], []
    for result in report.results:
        if not result.check_id.endswith(".runtime") or result.outcome is Outcome.SKIPPED:
            continue
        median, p95 = as_float(figure_value(result, "median time")), as_float(figure_value(result, "p95 time"))
        if median is None:
            continue
        impl = str(result.extra.get("implementation", result.check_id))
        dtype = str(result.extra.get("dtype", "?"))
        timing.append((f"{impl} {dtype}", median, p95 if p95 is not None else median))
        fraction = as_float(figure_value(result, "achieved fraction of the roofline floor"))
        intensity = as_float(figure_value(result, "arithmetic intensity"))
        if fraction is not None:
            roof.append((impl, dtype, max(intensity or 0.0, 1e-3), fraction))
    charts: list[Chart] = []
    if timing:
        series = [Series("median", [Point(i, m, tip=f"{name}: median {m:.3g} us") for i, (name, m, _) in
                                    enumerate(timing)]),
                  Series("p95", [Point(i + 0.15, p, tip=f"{name}: p95 {p:.3g} us") for i, (name, _, p) in
                                 enumerate(timing)])]
        names = "; ".join(f"{i}: {name}" for i, (name, _, _) in enumerate(timing))
        charts.append(("chart-runtime", f"Runtime at perf_dims per implementation x dtype (x index: {names})",
                       scatter_chart("GPU time, median and p95", series, "implementation x dtype (index)", "us",
                                     log_y=True, chart_id="svg-runtime")))
    if roof:
        per_dtype: dict[str, Series] = {}
        for impl, dtype, intensity, fraction in roof:
            per_dtype.setdefault(dtype, Series(dtype)).points.append(
                Point(intensity, fraction, tip=f"{impl} {dtype}: {fraction:.0%} of the roofline at {intensity:.3g} "
                                              "FLOP/B"))
        charts.append(("chart-roofline", "Roofline: each implementation's measured point per dtype, as the fraction "
                       "of the roofline floor it reaches (1.0 = at the roof) at its arithmetic intensity",
                       scatter_chart("Measured point on the roofline", list(per_dtype.values()),
                                     "arithmetic intensity (FLOP/byte)", "fraction of the roof reached",
                                     log_x=True, ref_lines=[RefLine(1.0, "roof")], chart_id="svg-roofline")))
    return charts
