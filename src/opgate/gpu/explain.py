"""`opgate explain REPORT`: the limiter of every profiled kernel launch, in one line each, from an ncu CSV or
a saved `.ncu-rep` (read through `ncu --import`), on any machine."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from opgate.model.errors import InputError
from opgate.gpu.judge.limiter import Diagnosis, ceilings_for, diagnose, load_profiles


def explain_reports(paths: Sequence[Path], gpu: str | None = None, kernel: str | None = None) -> list[Diagnosis]:
    """Diagnoses of every launch in these reports (`kernel`: a regular expression on the kernel name)."""
    try:
        pattern = re.compile(kernel) if kernel else None
    except re.error as exc:
        raise InputError(f"--kernel {kernel!r} is not a regular expression ({exc})") from None
    if gpu:  # a GPU the user names must be one opgate knows: an unknown one was ignored silently
        from opgate.core.gpus import lookup_gpu

        try:
            lookup_gpu(gpu)
        except InputError as exc:
            raise InputError(f"--gpu: {exc}") from None
    found: list[Diagnosis] = []
    for path in paths:
        for profile in load_profiles(path):
            if pattern is not None and not pattern.search(profile.kernel):
                continue
            found.append(diagnose(profile, ceilings_for(gpu or profile.gpu_name)))
    if not found:
        raise InputError(f"no kernel launch in {', '.join(map(str, paths))} matches --kernel {kernel!r}; "
                         "drop --kernel to see them all")
    return found


def diagnosis_result(d: Diagnosis):
    """One launch's diagnosis as a CheckResult: informational (passed), the line as the reason, the figures with
    units and, where a rule used one, its threshold."""
    from opgate.gpu.judge import limiter
    from opgate.model.results import CheckResult, Figure, Outcome, Threshold, slug

    policy = "opgate.gpu.judge.limiter (opgate's rule, not a vendor figure)"
    thresholds = {
        "DRAM throughput": Threshold(limiter.BANDWIDTH_BOUND_PCT, ">=", policy),
        "L2 throughput": Threshold(limiter.BANDWIDTH_BOUND_PCT, ">=", policy),
        "theoretical occupancy": Threshold(limiter.LOW_OCCUPANCY_PCT, "<=", policy),
        "shared wavefronts per instruction": Threshold(limiter.BANK_CONFLICT_WAVEFRONTS, ">=", policy),
    }
    # keyed per launch, as reports have keyed them
    figures = tuple(Figure(name, value, unit, thresholds.get(name)
                           or (Threshold(limiter.DOMINANT_STALL * 100, ">=", policy) if name.startswith("stall:") else None),
                           key=f"explain.{d.launch_id}.{slug(name)}")
                    for name, value, unit in d.figures)
    return CheckResult(check_id=f"explain.{d.launch_id}.{d.kernel.split('(')[0][:80]}",
                       title=f"{d.kernel} (launch {d.launch_id})", outcome=Outcome.PASSED,
                       reason=f"{d.limiter}: {d.line}", figures=figures, remediation=d.remedy, extra=d.to_dict())


def to_run_report(diagnoses: Sequence[Diagnosis], paths: Sequence[Path]):
    import datetime as _dt

    from opgate import __version__
    from opgate.model.results import RunReport
    from opgate.engine.session import host_facts

    return RunReport(verb="explain", results=tuple(diagnosis_result(d) for d in diagnoses),
                     started_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), duration_s=0.0,
                     host=host_facts(), tool_version=__version__, extra={"reports": [str(p) for p in paths]})


def run_explain(paths: Sequence[Path], gpu: str | None, kernel: str | None, json_path: Path | None, verbose: bool,
                console, chart: Path | None = None) -> int:
    from rich.table import Table
    from rich.text import Text

    diagnoses = explain_reports(paths, gpu, kernel)
    for d in diagnoses:
        console.print(Text(f"{d.kernel} (launch {d.launch_id}): {d.limiter}", style="bold cyan"))
        console.print(f"  {d.line}", highlight=False)
        if verbose:
            table = Table(show_header=True, expand=False)
            table.add_column("figure")
            table.add_column("value", justify="right")
            table.add_column("unit")
            for name, value, unit in d.figures:
                table.add_row(name, str(value), unit)
            console.print(table)
    if json_path:
        from opgate.reporting.emit import ReportOutputs, emit

        emit(to_run_report(diagnoses, paths), ReportOutputs(json=json_path), console.print)
    if chart:
        try:
            drawn = write_roofline_chart(diagnoses, chart)
        except ImportError:
            drawn = None
            console.print("roofline chart: not drawn, matplotlib is not installed (pip install matplotlib)")
        else:
            console.print(f"roofline chart: {drawn}" if drawn else
                          "roofline chart: not drawn, no launch has FLOP counters (profile with --set full)")
    console.print(f"{len(diagnoses)} launch(es) explained — exit code 0", highlight=False)
    return 0


def write_roofline_chart(diagnoses: Sequence[Diagnosis], path: Path) -> Path | None:
    """One roofline chart (PNG) of the launches with counted FLOPs: a filled marker against the HBM ceiling
    (FLOP per DRAM byte) and a hollow one against the L2 ceiling (FLOP per L2 byte), under the ceilings each
    launch was judged with (measured on the card where the doctor cached them). None when nothing can be drawn."""
    points = [d for d in diagnoses if d.roofline is not None and d.roofline.flops_counted]
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(9, 6), dpi=110)
    intensities = [i for d in points for i in (d.roofline.intensity("hbm"), d.roofline.intensity("l2")) if i]
    low, high = min([0.01, *(i / 4 for i in intensities)]), max([1e3, *(i * 4 for i in intensities)])
    drawn: set[tuple[str, float]] = set()
    for d in points:
        c = d.roofline.ceilings
        peak = c.peak_flops.get(d.roofline.precision)
        for label, bandwidth, style in (("HBM", c.hbm_bytes_per_s, "-"), ("L2", c.l2_bytes_per_s, "--")):
            if not bandwidth or (label, bandwidth) in drawn:
                continue
            drawn.add((label, bandwidth))
            top = peak or bandwidth * high
            ridge = top / bandwidth
            axes.plot([low, ridge, high], [low * bandwidth, top, top], style, color="gray", linewidth=1.2,
                      label=f"{label} {bandwidth / 1e12:.2f} TB/s" + (f", {d.roofline.precision} peak" if peak else ""))
    colors = plt.get_cmap("tab10")
    for index, d in enumerate(points):
        color = colors(index % 10)
        name = d.kernel.split("(")[0][:40]
        hbm, l2 = d.roofline.intensity("hbm"), d.roofline.intensity("l2")
        if hbm:
            axes.plot([hbm], [d.roofline.flops_per_s], "o", color=color, label=f"{name}: {d.limiter}")
        if l2:
            axes.plot([l2], [d.roofline.flops_per_s], "o", color=color, markerfacecolor="none",
                      label=None if hbm else f"{name}: {d.limiter}")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (FLOP / byte; filled: DRAM bytes, hollow: L2 bytes)")
    axes.set_ylabel("achieved FLOP/s")
    axes.set_title("opgate explain: roofline points of the profiled launches")
    axes.grid(True, which="both", linewidth=0.3)
    axes.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)
    return path
