"""How an `opgate analyze` report renders beyond what every report shows (opgate.reporting.renderers), registered
as the `analyze` entry point of `opgate.report.renderers`: the terminal summary below the live portability matrix
and roofline (each problem with its remedy, the counts), occupancy curves per compiled kernel beside the figures
against thresholds, the spec file as the history subject, and the command that re-analyzes one target."""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from opgate.reporting.charts import threshold_band_charts
from opgate.reporting.renderers import Chart, VerbRenderers
from opgate.reporting.svg import Point, Series, scatter_chart
from opgate.model.results import CheckResult, Outcome, RunReport

if TYPE_CHECKING:
    from rich.console import Console


def render_summary(report: RunReport, console: "Console", verbose: bool = False) -> None:
    """Each failure, warning and error with its reason and remedy (every check's evidence with -v), the counts."""
    from opgate.reporting.terminal import render_terminal

    problems = [r for r in report.results if r.outcome in (Outcome.FAILED, Outcome.WARNED, Outcome.ERROR)]
    for result in problems:
        console.print(f"{result.outcome.value.upper()} {result.check_id}: {result.reason}", highlight=False,
                      markup=False)
        if result.remediation:
            console.print(f"  → {result.remediation}", highlight=False, markup=False)
    if verbose:
        render_terminal(report, console, verbose=True)
    counts = ", ".join(f"{n} {name}" for name, n in report.counts().items() if n)
    console.print(f"{counts} in {report.duration_s:.1f}s — exit code {int(report.exit_code)}")


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


def analyze_charts(report: RunReport) -> list[Chart]:
    return analyze_occupancy_charts(report) + threshold_band_charts(report)


def history_subject(report: RunReport) -> str:
    """The spec file; the host for a report that names none."""
    if report.extra.get("spec_file"):
        return str(report.extra["spec_file"])
    return str(report.host.get("hostname", "")) if report.host else ""


def replay_command(report: RunReport, result: CheckResult) -> str:
    spec = str(report.extra.get("spec_file", "SPEC.py"))
    target = result.check_id.rsplit(".", 1)[-1]
    return f"opgate analyze {shlex.quote(spec)} --targets {target}"


RENDERERS = VerbRenderers(terminal=render_summary, charts=analyze_charts, history_subject=history_subject,
                          replay_command=replay_command)
