"""The charts of an HTML report, per verb, from the report alone (no live GPU, no re-run).

Each function returns (chart id, SVG) pairs; a chart whose data the run did not produce is simply absent.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Mapping

from opgate.reporting.metrics import metric_for
from opgate.reporting.svg import Band, Point, RefLine, Series, band_chart, matrix_chart, scatter_chart
from opgate.results import Outcome, RunReport

Chart = tuple[str, str, str]  # (id, caption, svg)
_DIMS = re.compile(r"([A-Za-z_]\w*)=(\d+)")


def _labels(result: Any) -> dict[str, str]:
    if not result.figures:
        return {}
    return dict(metric_for(result, result.figures[0]).labels)


def _size_of(case_label: str) -> int | None:
    sizes = [int(v) for _, v in _DIMS.findall(case_label.split(" seed=")[0])]
    return math.prod(sizes) if sizes else None


def _as_float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def verify_error_charts(report: RunReport) -> list[Chart]:
    """RMSE against problem size per implementation, per dtype, the budget beside it, failures as red crosses."""
    by_dtype: dict[str, dict[str, Series]] = {}
    budgets: dict[str, dict[str, Series]] = {}
    for result in report.results:
        cases = result.extra.get("cases") if isinstance(result.extra, Mapping) else None
        if not isinstance(cases, list):
            continue
        labels = _labels(result) or {}
        dtype = str(result.extra.get("dtype") or labels.get("dtype") or "?")
        impl = str(result.extra.get("implementation") or labels.get("impl") or result.check_id)
        series = by_dtype.setdefault(dtype, {}).setdefault(impl, Series(impl))
        budget = budgets.setdefault(dtype, {}).setdefault(impl, Series(f"{impl} budget", tick=True))
        for row in cases:
            size = _size_of(str(row.get("case", "")))
            outputs = row.get("outputs") or []
            if size is None or not outputs:
                continue
            rmse, limit = _as_float(outputs[0].get("rmse")), _as_float(outputs[0].get("rmse_budget"))
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


def _figure(result: Any, name: str) -> Any:
    return next((f.value for f in result.figures if f.name == name), None)


def verify_runtime_charts(report: RunReport) -> list[Chart]:
    """Median and p95 time per implementation x dtype, and each one's point on the normalized roofline."""
    timing, roof = [], []
    for result in report.results:
        if not result.check_id.endswith(".runtime") or result.outcome is Outcome.SKIPPED:
            continue
        median, p95 = _as_float(_figure(result, "median time")), _as_float(_figure(result, "p95 time"))
        if median is None:
            continue
        impl = str(result.extra.get("implementation", result.check_id))
        dtype = str(result.extra.get("dtype", "?"))
        timing.append((f"{impl} {dtype}", median, p95 if p95 is not None else median))
        fraction = _as_float(_figure(result, "achieved fraction of the roofline floor"))
        intensity = _as_float(_figure(result, "arithmetic intensity"))
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


def inspect_matrix_chart(report: RunReport) -> list[Chart]:
    cells: dict[tuple[str, str], str] = {}
    rows: list[str] = []
    columns: list[str] = []
    for verdict in report.extra.get("verdicts", []) or []:
        binary = str(verdict.get("binary", "?"))
        target = verdict.get("target", {})
        column = str(target.get("label", target) if isinstance(target, Mapping) else target)
        if binary not in rows:
            rows.append(binary)
        if column not in columns:
            columns.append(column)
        cells[(binary, column)] = str(verdict.get("status", ""))
    if not rows or not columns:
        return []
    return [("chart-fleet", "Fleet verdict matrix: every binary on every target (native SASS, PTX JIT, "
             "unsupported)", matrix_chart("Binary x target verdicts", rows, columns, cells, chart_id="svg-fleet"))]


def _occupancy_curve(launch: Mapping[str, Any], cc: str, vary: str, values: Iterable[int]) -> list[Point]:
    from opgate.core.limits import sm_limits
    from opgate.core.occupancy import KernelLaunch, occupancy

    limits = sm_limits(cc)
    points = []
    for value in values:
        fields = {"threads_per_block": int(launch.get("threads_per_block", 128)),
                  "registers_per_thread": int(launch.get("registers_per_thread", 32)),
                  "static_shared_bytes": int(launch.get("static_shared_bytes", 0)),
                  "dynamic_shared_bytes": int(launch.get("dynamic_shared_bytes", 0)),
                  "block_barriers": int(launch.get("block_barriers", 1) or 1)}
        fields[vary] = value
        try:
            result = occupancy(KernelLaunch(**fields), limits)
        except Exception:  # a value past the architecture's limits: the curve simply stops there
            continue
        points.append(Point(value, result.occupancy))
    return points


def analyze_occupancy_charts(report: RunReport) -> list[Chart]:
    """Occupancy against registers per thread and shared memory per block, from opgate's occupancy calculator,
    with each compiled kernel's own point marked."""
    charts: list[Chart] = []
    for result in report.results:
        if not result.check_id.startswith("analyze.occupancy.") or result.outcome is Outcome.SKIPPED:
            continue
        kernels, seen = [], set()
        for kernel in result.extra.get("kernels", []):
            occ = kernel.get("occupancy")
            if not isinstance(occ, Mapping):
                continue
            launch = occ.get("launch", {})
            shape = (kernel.get("kernel_name"), launch.get("threads_per_block"), launch.get("registers_per_thread"),
                     launch.get("static_shared_bytes"), launch.get("dynamic_shared_bytes"))
            if shape not in seen:  # one curve per distinct launch shape (dtype variants often compile alike)
                seen.add(shape)
                kernels.append(kernel)
        if not kernels:
            continue
        target = result.check_id.rsplit(".", 1)[-1]
        reg_series, smem_series = [], []
        for kernel in kernels[:4]:
            occ = kernel["occupancy"]
            launch, cc = occ.get("launch", {}), str(occ.get("compute_capability"))
            name = (f"{kernel.get('kernel_name', '?')} {launch.get('threads_per_block')}t "
                    f"{launch.get('registers_per_thread')}r")
            regs = _occupancy_curve(launch, cc, "registers_per_thread", range(16, 256, 8))
            smem_top = max(48 * 1024, int(occ.get("smem_config_bytes") or 0))
            smem = _occupancy_curve(launch, cc, "dynamic_shared_bytes", range(0, smem_top + 1, max(1, smem_top // 40)))
            if regs:
                reg_series.append(Series(name, regs, line=True))
                reg_series.append(Series(f"{name} compiled", [Point(int(launch.get("registers_per_thread", 0)),
                                                                      float(occ.get("occupancy", 0.0)),
                                                                      tip=f"{kernel.get('label')}")]))
            if smem:
                smem_series.append(Series(name, smem, line=True))
        slug = re.sub(r"[^A-Za-z0-9]+", "-", result.check_id)
        if reg_series:
            charts.append((f"chart-{slug}-regs", f"{result.title}: occupancy vs registers per thread (dashed: the "
                           "occupancy calculator; dot: the compiled kernel)",
                           scatter_chart(f"Occupancy vs registers ({target})", reg_series, "registers per thread",
                                         "occupancy", chart_id=f"svg-{slug}-regs")))
        if smem_series:
            charts.append((f"chart-{slug}-smem", f"{result.title}: occupancy vs shared memory per block",
                           scatter_chart(f"Occupancy vs shared memory ({target})", smem_series,
                                         "shared memory per block (bytes)", "occupancy",
                                         chart_id=f"svg-{slug}-smem")))
    return charts


def _passes(value: float, comparison: str, threshold: float) -> bool:
    return {">=": value >= threshold, "<=": value <= threshold, ">": value > threshold, "<": value < threshold,
            "==": value == threshold}.get(comparison, True)


def doctor_band_charts(report: RunReport) -> list[Chart]:
    """Every numeric doctor figure that has a numeric threshold, against that threshold."""
    bands = []
    for result in report.results:
        for figure in result.figures:
            if figure.threshold is None:
                continue
            value, limit = _as_float(figure.value), _as_float(figure.threshold.value)
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
    if report.verb == "verify":
        return verify_runtime_charts(report) + verify_error_charts(report)
    if report.verb == "inspect":
        return inspect_matrix_chart(report)
    if report.verb == "analyze":
        return analyze_occupancy_charts(report) + doctor_band_charts(report)
    return doctor_band_charts(report)
