"""`opgate analyze FILE.py`: portability matrix, occupancy per kernel per target, roofline per GPU x dtype.

Collect (child processes compile, the parent counts work), judge (CheckResults), render (terminal, JSON,
charts): the three layers stay apart. Only portability can fail a run: a required target whose kernels do
not compile, or cannot launch, exits 1. Occupancy and roofline are evidence, reported as passed/skipped.
"""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table

from opgate import __version__
from opgate.analyze.portability import (
    STATUS_OUTCOME,
    CompileOutcome,
    MatrixRequest,
    Target,
    limits_for_arch,
    run_matrix,
)
from opgate.analyze.roofline import RooflineAnalysis, analyze_operator, write_chart
from opgate.model.errors import InputError
from opgate.core.gpus import GpuModel, lookup_gpu
from opgate.model.results import CheckResult, Figure, Outcome, RunReport, Threshold

STAGES = ("portability", "occupancy", "roofline")
# One representative GPU per default target (sm_75, 80, 86, 89, 90, 100, 120) for the roofline.
DEFAULT_GPUS = ("t4", "a100", "a10", "l40s", "h100", "b200", "rtx5090")


@dataclass(frozen=True)
class AnalyzeOptions:
    spec_file: Path
    targets: Sequence[Target]
    optional_targets: Sequence[Target] = ()
    gpus: Sequence[GpuModel] = ()
    out_dir: Path | None = None
    jobs: int = 2
    compile_timeout_s: float = 300.0
    stages: Sequence[str] = STAGES
    dtypes: Sequence[str] | None = None


@dataclass
class AnalyzeFindings:
    """What the stages found, before judging: kept for renderers and tests."""

    outcomes: list[CompileOutcome] = field(default_factory=list)
    rooflines: list[RooflineAnalysis] = field(default_factory=list)
    required: set[str] = field(default_factory=set)
    operators_without_triton: list[str] = field(default_factory=list)
    timings_s: dict[str, float] = field(default_factory=dict)


def parse_gpus(text: str | None) -> list[GpuModel]:
    keys = DEFAULT_GPUS if not text else [k.strip() for k in text.split(",") if k.strip()]
    gpus: list[GpuModel] = []
    for key in keys:
        gpu = lookup_gpu(key)
        if gpu not in gpus:
            gpus.append(gpu)
    return gpus


def parse_stages(text: str | None) -> list[str]:
    if not text:
        return list(STAGES)
    stages = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise InputError(f"--stages {unknown[0]!r} is not a stage of opgate analyze; choose from {', '.join(STAGES)}")
    if "occupancy" in stages and "portability" not in stages:
        stages.insert(0, "portability")  # occupancy reads the registers of the compiled kernels
    return stages


def _load_operators(spec_file: Path) -> list[Any]:
    """Import the spec under the compile-only driver, so module-level device queries work without a GPU."""
    from opgate.engine.specload import load_spec_isolated

    return load_spec_isolated(spec_file, mode="analyze")


# -- collect -------------------------------------------------------------------------------------------------------

def collect(options: AnalyzeOptions, console: Console | None = None) -> AnalyzeFindings:
    findings = AnalyzeFindings()
    started = time.perf_counter()
    operators = _load_operators(options.spec_file)
    findings.timings_s["load_spec"] = time.perf_counter() - started
    targets = list(options.targets) + [t for t in options.optional_targets if t not in options.targets]
    findings.required = {t.label for t in options.targets}
    if "portability" in options.stages:
        requests = []
        for op in operators:
            triton_impls = [name for name, impl in op.implementations.items() if impl.backend == "triton"]
            if not triton_impls:
                findings.operators_without_triton.append(op.name)
            for name in triton_impls:
                requests += [MatrixRequest(options.spec_file, op.name, name, t,
                                           tuple(options.dtypes) if options.dtypes else None) for t in targets]
        t0 = time.perf_counter()

        def progress(task: Any, result: CheckResult) -> None:
            if console is not None:
                console.print(f"  compiled {task.title}: {result.outcome.value} ({result.duration_s:.1f}s)",
                              highlight=False)

        findings.outcomes = run_matrix(requests, jobs=options.jobs, timeout_s=options.compile_timeout_s,
                                       on_done=progress)
        findings.timings_s["portability"] = time.perf_counter() - t0
    if "roofline" in options.stages:
        t0 = time.perf_counter()
        for op in operators:
            analysis = analyze_operator(op, options.gpus)
            if options.out_dir is not None and analysis.points:
                charts = write_chart(analysis, options.out_dir)
                analysis = RooflineAnalysis(analysis.operator, analysis.points, analysis.skipped, analysis.notes,
                                            charts)
            findings.rooflines.append(analysis)
        findings.timings_s["roofline"] = time.perf_counter() - t0
    return findings


# -- judge ---------------------------------------------------------------------------------------------------------

def _portability_result(outcome: CompileOutcome, required: bool) -> CheckResult:
    check_id = f"analyze.portability.{outcome.operator}.{outcome.implementation}.{outcome.target}"
    outcome_value = STATUS_OUTCOME[outcome.status]
    limits = limits_for_arch(outcome.arch)
    if not required and outcome_value is Outcome.FAILED:
        outcome_value = Outcome.WARNED
    figures = []
    for kernel in outcome.kernels:
        labels = {"kernel": kernel.label}
        if kernel.registers is not None:
            figures.append(Figure(f"{kernel.label} registers", kernel.registers, "per thread",
                                  key="analyze.portability.registers", labels=labels))
        if kernel.shared_bytes is not None:
            threshold = (Threshold(limits.smem_per_block_optin, "<=", limits.source) if limits else None)
            figures.append(Figure(f"{kernel.label} shared memory", kernel.shared_bytes, "B/block", threshold,
                                  key="analyze.portability.shared_memory", labels=labels))
        if kernel.local_bytes:
            figures.append(Figure(f"{kernel.label} local memory", kernel.local_bytes, "B/thread",
                                  key="analyze.portability.local_memory", labels=labels))
    counts: dict[str, int] = {}
    for kernel in outcome.kernels:
        counts[kernel.status] = counts.get(kernel.status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    reason = f"{outcome.target}: {len(outcome.kernels)} kernel(s): {summary}"
    if outcome.status != "ok":
        reason += f"; {outcome.message}"
    if not required:
        reason += " (optional target)"
    remediation = {
        "compile_error": "Guard the kernel for this architecture, or drop the target from the fleet.",
        "resource_overflow": "Lower BLOCK sizes / num_stages for this target (e.g. a per-arch autotune config).",
        "capture_error": "Let the launcher run on CPU tensors: allocate with torch.empty_like(x) or "
                         "device=x.device, and read device limits from triton.runtime.driver.active.utils."
                         "get_device_properties (opgate answers it per target); see docs/analyze.md.",
        "spills": "Reduce per-thread live values (smaller tiles, fewer stages) or raise num_warps.",
        "timeout": "Raise --compile-timeout, or report the kernel to Triton if the compiler hangs.",
        "crashed": "The compiler crashed in its child process; the stderr tail is in the JSON report.",
    }.get(outcome.status, "")
    return CheckResult(check_id, f"{outcome.operator}/{outcome.implementation} compiles for {outcome.target}",
                       outcome_value, reason, tuple(figures), remediation, outcome.duration_s,
                       {"compile": outcome.to_dict(), "required": required}, stage="portability",
                       labels=_target_labels(outcome))


def _target_labels(outcome: CompileOutcome) -> dict[str, str]:
    """What a portability or occupancy result judged: an operator's implementation on one target."""
    return {"op": outcome.operator, "impl": outcome.implementation, "target": outcome.target}


def _occupancy_result(outcome: CompileOutcome) -> CheckResult:
    check_id = f"analyze.occupancy.{outcome.operator}.{outcome.implementation}.{outcome.target}"
    title = f"{outcome.operator}/{outcome.implementation} occupancy on {outcome.target}"
    with_occupancy = [k for k in outcome.kernels if k.occupancy is not None]
    if not with_occupancy:
        why = ("no SM limits for this architecture in opgate's table" if limits_for_arch(outcome.arch) is None
               else "no kernel compiled with known registers" if outcome.kernels else "nothing compiled")
        return CheckResult(check_id, title, Outcome.SKIPPED, f"{outcome.target}: {why}", stage="occupancy",
                           labels=_target_labels(outcome))
    figures = []
    lines = []
    for kernel in with_occupancy:
        occ = kernel.occupancy
        assert occ is not None
        labels = {"kernel": kernel.label}
        figures.append(Figure(f"{kernel.label} occupancy", round(occ.occupancy, 4), "fraction of max warps",
                              key="analyze.occupancy.occupancy", labels=labels))
        figures.append(Figure(f"{kernel.label} active warps", occ.active_warps_per_sm, "warps/SM",
                              key="analyze.occupancy.active_warps", labels=labels))
        lines.append(f"{kernel.label}: {occ.active_warps_per_sm}/{occ.max_warps_per_sm} warps "
                     f"({occ.occupancy:.0%}, {occ.limiter_text})")
    worst = min(with_occupancy, key=lambda k: k.occupancy.occupancy if k.occupancy else 1.0)
    reason = f"{outcome.target}: lowest {worst.occupancy.occupancy:.0%} ({worst.label})"  # type: ignore[union-attr]
    suggestions = [f"{k.label}: {s.text}" for k in with_occupancy for s in (k.occupancy.suggestions if k.occupancy else ())]
    return CheckResult(check_id, title, Outcome.PASSED, reason, tuple(figures), "; ".join(suggestions[:3]),
                       0.0, {"kernels": [k.to_dict() for k in with_occupancy], "summary": lines,
                             "suggestions": suggestions}, stage="occupancy", labels=_target_labels(outcome))


def _roofline_results(analysis: RooflineAnalysis, gpus: Sequence[GpuModel]) -> list[CheckResult]:
    results = []
    for gpu in gpus:
        check_id = f"analyze.roofline.{analysis.operator}.{gpu.key}"
        title = f"{analysis.operator} roofline on {gpu.key}"
        labels = {"op": analysis.operator, "gpu_model": gpu.key}
        points = [p for p in analysis.points if p.gpu == gpu.key]
        skipped = [s for s in analysis.skipped if s.startswith(f"{gpu.key} ")]
        if not points:
            results.append(CheckResult(check_id, title, Outcome.SKIPPED,
                                       "; ".join(skipped) or "no case to evaluate",
                                       extra={"skipped": skipped}, stage="roofline", labels=labels))
            continue
        figures = []
        for p in points:
            label = f"{p.work.dtype} {p.work.shape_label}"
            case = {"dtype": p.work.dtype, **({"dims": p.work.shape_label} if p.work.dims else {})}
            figures.append(Figure(f"{label} floor", p.floor_s * 1e6, "us", key="analyze.roofline.floor", labels=case))
            figures.append(Figure(f"{label} intensity", round(p.work.intensity, 4) if p.work.bytes else None,
                                  "FLOP/B", key="analyze.roofline.intensity", labels=case))
            figures.append(Figure(f"{label} bound", p.bound, key="analyze.roofline.bound", labels=case))
            if p.achieved_fraction is not None:
                figures.append(Figure(f"{label} achieved", round(p.achieved_fraction, 4), "of floor",
                                      key="analyze.roofline.achieved", labels=case))
        bounds = sorted({p.bound for p in points})
        reason = (f"{gpu.key}: {len(points)} case(s), {'/'.join(bounds)}-bound; floors "
                  f"{min(p.floor_s for p in points) * 1e6:.3g}-{max(p.floor_s for p in points) * 1e6:.3g} us")
        if skipped:
            reason += f"; skipped: {'; '.join(skipped)}"
        results.append(CheckResult(check_id, title, Outcome.PASSED, reason, tuple(figures), "", 0.0, {
            "points": [p.to_dict() for p in points], "notes": list(analysis.notes), "skipped": skipped,
            "charts": [str(c) for c in analysis.charts],
        }, stage="roofline", labels=labels))
    return results


def judge(findings: AnalyzeFindings, options: AnalyzeOptions) -> list[CheckResult]:
    results: list[CheckResult] = []
    for name in findings.operators_without_triton:
        results.append(CheckResult(f"analyze.portability.{name}", f"{name} has Triton kernels to compile",
                                   Outcome.SKIPPED, f"operator {name!r} has no triton implementation",
                                   stage="portability", labels={"op": name}))
    for outcome in findings.outcomes:
        results.append(_portability_result(outcome, outcome.target in findings.required))
    if "occupancy" in options.stages:
        results += [_occupancy_result(outcome) for outcome in findings.outcomes]
    for analysis in findings.rooflines:
        results += _roofline_results(analysis, options.gpus)
    return results


def run_analyze(options: AnalyzeOptions, console: Console | None = None) -> tuple[RunReport, AnalyzeFindings]:
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    findings = collect(options, console)
    results = judge(findings, options)
    from opgate.engine.session import host_facts

    report = RunReport(
        verb="analyze",
        results=tuple(results),
        started_at=started_at,
        duration_s=time.perf_counter() - t0,
        host=host_facts(),
        tool_version=__version__,
        extra={
            "spec_file": str(options.spec_file),
            "targets": [t.label for t in options.targets],
            "optional_targets": [t.label for t in options.optional_targets],
            "gpus": [g.key for g in options.gpus],
            "stages": list(options.stages),
            "charts": [str(c) for a in findings.rooflines for c in a.charts],
            "timings_s": {k: round(v, 3) for k, v in findings.timings_s.items()},
        },
    )
    return report, findings


# -- render --------------------------------------------------------------------------------------------------------

def _duration(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.3g} us"
    return f"{seconds * 1e9:.3g} ns"


def render_roofline(findings: AnalyzeFindings, console: Console, verbose: bool = False) -> None:
    """One table per operator: a row per dtype (x shape under -v), a floor per GPU (m = memory-, c = compute-bound).

    By default only the largest shape (the spec's perf_dims when it gives them) is shown; every shape is in
    the JSON and under -v."""
    for analysis in findings.rooflines:
        gpus = list(dict.fromkeys(p.gpu for p in analysis.points))
        points = list(analysis.points)
        if not verbose and points:
            largest = max(points, key=lambda p: (p.work.flops, p.work.bytes)).work.dims
            points = [p for p in points if p.work.dims == largest]
            shapes = len({p.work.shape_label for p in analysis.points})
            console.print(f"roofline floors of {analysis.operator} at {points[0].work.shape_label}"
                          + (f" (the largest of {shapes} shapes; all: -v or --json)" if shapes > 1 else ""),
                          highlight=False)
        if not verbose:  # one shape: a GPU per row, a dtype per column (nine GPU columns clipped at 80 columns)
            console.print(_floors_by_gpu(analysis.operator, points, gpus))
            for note in _notes_by_text(analysis.notes):
                console.print(f"  work: {note}", highlight=False)
            for skipped in analysis.skipped:
                console.print(f"  skipped: {skipped}", highlight=False)
            for chart in analysis.charts:
                console.print(f"  chart: {chart}", highlight=False)
            continue
        table = Table(title=f"roofline floors: {analysis.operator} (m = memory-bound, c = compute-bound)",
                      expand=False)
        table.add_column("dtype", no_wrap=True)
        if verbose:
            table.add_column("shape", overflow="fold")
        for column in ("FLOP/B", *gpus):
            table.add_column(column, justify="right", no_wrap=True)
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for p in points:
            row = rows.setdefault((p.work.dtype, p.work.shape_label), {"work": p.work})
            row[p.gpu] = f"{_duration(p.floor_s)} {p.bound[0]}"
        for (dtype, shape), row in rows.items():
            work = row["work"]
            table.add_row(dtype, *([shape] if verbose else []), f"{work.intensity:.3g}",
                          *(row.get(g, "-") for g in gpus))
        console.print(table)
        for note in analysis.notes:
            console.print(f"  work: {note}", highlight=False)
        for skipped in analysis.skipped:
            console.print(f"  skipped: {skipped}", highlight=False)
        for chart in analysis.charts:
            console.print(f"  chart: {chart}", highlight=False)


def _floors_by_gpu(operator: str, points: Sequence[Any], gpus: Sequence[str]) -> Any:
    """The roofline floors of one shape as a table with a row per GPU and a column per dtype (its FLOP/byte in
    the header): it fits 80 columns where a column per GPU did not."""
    from rich.table import Table

    dtypes = list(dict.fromkeys(p.work.dtype for p in points))
    intensity = {p.work.dtype: p.work.intensity for p in points}
    table = Table(title=f"roofline floors: {operator} (m = memory-bound, c = compute-bound)", expand=False)
    table.add_column("GPU", no_wrap=True)
    for dtype in dtypes:
        table.add_column(f"{dtype}\n{intensity[dtype]:.3g} FLOP/B", justify="right", no_wrap=True)
    floors = {(p.gpu, p.work.dtype): f"{_duration(p.floor_s)} {p.bound[0]}" for p in points}
    for gpu in gpus:
        table.add_row(gpu, *(floors.get((gpu, dtype), "-") for dtype in dtypes))
    return table


def _notes_by_text(notes: Sequence[str]) -> list[str]:
    """"float32: declared bytes()" for each dtype once: "declared bytes() (float32, float16, bfloat16)"."""
    grouped: dict[str, list[str]] = {}
    for note in notes:
        head, sep, text = note.partition(": ")
        grouped.setdefault(text if sep else note, []).append(head if sep else "")
    return [f"{text} ({', '.join(h for h in heads if h)})" if any(heads) else text for text, heads in grouped.items()]
