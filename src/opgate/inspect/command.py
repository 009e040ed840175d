"""`opgate inspect`: read the binaries, judge them against the targets, render, write reports.

Layers: sources/fatbin/cubin collect facts, compat judges, this module renders and maps verdicts to
CheckResults so the shared JSON and JUnit reporters apply unchanged.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from opgate.model.errors import InputError
from opgate.inspect.compat import (
    JIT,
    NATIVE,
    NO_DEVICE_CODE,
    UNREADABLE,
    UNSUPPORTED,
    Target,
    Verdict,
    judge_all,
    load_fleet,
    parse_targets,
)
from opgate.inspect.model import KIND_PTX, KIND_SASS, BinaryReport
from opgate.inspect.sources import inspect_paths
from opgate.model.results import CheckResult, ExitCode, Figure, Outcome, RunReport

if TYPE_CHECKING:
    from opgate.reporting.emit import ReportOutputs

STATUS_STYLE = {
    NATIVE: ("native", "green", Outcome.PASSED),
    JIT: ("jit", "yellow", Outcome.WARNED),
    UNSUPPORTED: ("UNSUPPORTED", "bold red", Outcome.FAILED),
    NO_DEVICE_CODE: ("no device code", "dim", Outcome.SKIPPED),
    UNREADABLE: ("unreadable", "bold magenta", Outcome.FAILED),
}


def resolve_targets(targets: str | None, fleet: Path | None) -> list[Target]:
    found: list[Target] = []
    if targets is not None and not targets.strip(" ,"):  # `--targets ""` judged nothing and passed
        raise InputError("--targets is empty; give GPUs or architectures, e.g. --targets h100,sm_90")
    if targets:
        found.extend(parse_targets(targets))
    if fleet is not None:
        found.extend(load_fleet(fleet))
    labels = [t.label for t in found]
    duplicate = next((label for label in labels if labels.count(label) > 1), None)
    if duplicate:
        raise InputError(f"target {duplicate!r} is given twice; give each GPU kind once (use name = ... in the "
                         "fleet file to tell drivers apart)")
    return found


def run_inspect(
    paths: Sequence[Path],
    targets: str | None,
    fleet: Path | None,
    kernels: bool,
    json_path: Path | None,
    console: Console,
    junit_path: Path | None = None,
    deep: bool = False,
    verbose: bool = False,
    outputs: ReportOutputs | None = None,
) -> int:
    """Inspect `paths`, print tables, write reports; return the exit code (0, 1 unsupported, 2 bad input)."""
    if not paths:
        raise InputError("no input given; pass binaries, wheels or directories, e.g. opgate inspect build/lib.so")
    fleet_targets = resolve_targets(targets, fleet)
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    reports = [nothing_read_is_fatal(r) for r in inspect_paths([Path(p) for p in paths], kernels=kernels, deep=deep)]
    if not reports:  # a folder of files without device code: nothing was judged, so nothing passed
        raise InputError(f"{', '.join(str(p) for p in paths[:3])}: no file with CUDA device code found (folders are "
                         "searched for cubins, fatbins, ELF objects, wheels and Triton caches); pass the binaries "
                         "to inspect")
    verdicts = judge_all(reports, fleet_targets)
    duration = time.perf_counter() - t0

    render_listing(reports, console, kernels, verbose=verbose)
    if kernels:
        render_kernels(reports, console)
    if fleet_targets:
        render_verdicts(reports, fleet_targets, verdicts, console, verbose=verbose)

    code = exit_code(reports, verdicts)
    from opgate.reporting.emit import ReportOutputs, emit

    wanted = dataclasses.replace(outputs or ReportOutputs(), json=json_path, junit=junit_path)
    if wanted.wanted:
        emit(to_run_report(reports, fleet_targets, verdicts, started_at, duration, code), wanted, console.print)
    console.print(summary_line(reports, verdicts, duration, code))
    report_unreadable(reports)
    return code


def nothing_read_is_fatal(report: BinaryReport) -> BinaryReport:
    """A file whose every device-code entry is damaged was not read at all (exit 2, docs/inspect.md); a
    file partly read keeps its errors, which its verdicts carry as a warning naming what was lost."""
    if report.fatal or not report.errors or report.loaded_entries():
        return report
    return dataclasses.replace(report, fatal=f"nothing could be read: {report.errors[0]}")


def report_unreadable(reports: Sequence[BinaryReport]) -> None:
    """One line on stderr per input that could not be read, as every other bad input gets."""
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for report in reports:
        if report.fatal:
            err.print(f"opgate: error: {report.label}: {report.fatal}", markup=False)


def exit_code(reports: Sequence[BinaryReport], verdicts: Sequence[Verdict]) -> int:
    if any(r.fatal for r in reports):
        return int(ExitCode.BAD_INPUT)
    if any(v.status == UNSUPPORTED for v in verdicts):
        return int(ExitCode.CHECK_FAILED)
    return int(ExitCode.OK)


def summary_line(reports: Sequence[BinaryReport], verdicts: Sequence[Verdict], duration: float, code: int) -> str:
    with_code = sum(1 for r in reports if r.loaded_entries() and not r.fatal)
    text = f"{len(reports)} file(s), {with_code} with device code"
    if verdicts:
        counts = {s: sum(1 for v in verdicts if v.status == s) for s in (NATIVE, JIT, UNSUPPORTED)}
        text += "; verdicts: " + ", ".join(f"{n} {s}" for s, n in counts.items())
    fatal = sum(1 for r in reports if r.fatal)
    if fatal:
        text += f"; {fatal} unreadable"
    return f"{text} in {duration:.2f}s — exit code {code}"


# -- rendering ---------------------------------------------------------------------------------------------

def display_names(reports: Sequence[BinaryReport]) -> dict[str, str]:
    """Shortest trailing path (1, 2, ... components) that still tells the files apart, plus `!member`."""
    paths = sorted({r.path for r in reports})
    parts = {p: Path(p).parts for p in paths}
    depth = 1
    while depth < max((len(v) for v in parts.values()), default=1):
        tails = [parts[p][-depth:] for p in paths]
        if len(set(tails)) == len(tails):
            break
        depth += 1
    short = {p: str(Path(*parts[p][-depth:])) if parts[p] else p for p in paths}
    return {r.label: short[r.path] + (f"!{r.member}" if r.member else "") for r in reports}


def _sass_text(report: BinaryReport) -> str:
    archs = [e.arch for e in report.entries if e.kind == KIND_SASS and e.usable]
    return ", ".join(sorted(dict.fromkeys(archs), key=_arch_key)) or "-"


def _ptx_text(report: BinaryReport) -> str:
    items = [f"{e.virtual_arch} (ISA {e.ptx_isa})" for e in report.entries if e.kind == KIND_PTX and e.usable]
    return ", ".join(sorted(dict.fromkeys(items), key=_arch_key)) or "-"


def _arch_key(text: str) -> tuple[int, str]:
    digits = "".join(ch for ch in text.split("_", 1)[-1] if ch.isdigit())
    return (int(digits) if digits else 0, text)


def _compression_text(report: BinaryReport) -> str:
    parts = []
    for kind, label in ((KIND_SASS, "SASS"), (KIND_PTX, "PTX")):
        kinds = sorted({e.compression for e in report.entries if e.kind == kind})
        if kinds:
            parts.append(f"{label}: {'/'.join(kinds)}")
    return "; ".join(parts) or "-"


# Without -v, files with identical rows (a Triton cache holds hundreds of near-identical cubins) share one row.
LISTED_NAMES = 3


def _grouped(labels: Sequence[str], names: dict[str, str], verbose: bool) -> str:
    """A table cell naming a group of files: all of them under -v, else the first few and a count."""
    shown = [names[label] for label in (labels if verbose else labels[:LISTED_NAMES])]
    more = len(labels) - len(shown)
    text = ", ".join(shown) + (f" +{more} more" if more else "")
    return text if len(labels) == 1 else f"{len(labels)} files: {text}"


def render_listing(reports: Sequence[BinaryReport], console: Console, kernels: bool, verbose: bool = False) -> None:
    if not reports:
        console.print("No CUDA device code found in the given inputs.")
        return
    names = display_names(reports)
    if not verbose:
        _render_listing_grouped(reports, names, console, kernels)
        return
    table = Table(title="opgate inspect: device code per file", show_lines=False, expand=False)
    table.add_column("file", style="cyan", overflow="fold", min_width=12)
    table.add_column("format", no_wrap=True)
    table.add_column("SASS (cubins)", overflow="fold")
    table.add_column("PTX", overflow="fold")
    table.add_column("compression", overflow="fold")
    table.add_column("images", justify="right", no_wrap=True)
    table.add_column("kernels", justify="right", no_wrap=True)
    for report in reports:
        sass_count = sum(1 for e in report.entries if e.kind == KIND_SASS)
        ptx_count = sum(1 for e in report.entries if e.kind == KIND_PTX)
        other = len(report.entries) - sass_count - ptx_count
        images = f"{sass_count}+{ptx_count}" + (f"+{other}" if other else "")
        if report.fatal:
            table.add_row(names[report.label], report.file_format or "?", Text(f"unreadable: {report.fatal}", "magenta"),
                          "", "", "", "")
            continue
        kernel_text = str(len({k.name for k in report.kernels})) if kernels else "-"
        table.add_row(names[report.label], report.file_format, _sass_text(report), _ptx_text(report),
                      _compression_text(report), images, kernel_text)
    console.print(table)
    if not kernels:
        console.print("images = SASS+PTX entries; kernel counts need --kernels (which decompresses the cubins)",
                      style="dim")
    for report in reports:
        for error in report.errors[:20]:
            console.print(Text(f"{names[report.label]}: {error}", style="magenta"))
        if len(report.errors) > 20:
            console.print(Text(f"{names[report.label]}: ... {len(report.errors) - 20} more errors in --json",
                               "magenta"))


def _listing_cells(report: BinaryReport, kernels: bool) -> tuple[str, ...]:
    sass_count = sum(1 for e in report.entries if e.kind == KIND_SASS)
    ptx_count = sum(1 for e in report.entries if e.kind == KIND_PTX)
    other = len(report.entries) - sass_count - ptx_count
    images = f"{sass_count}+{ptx_count}" + (f"+{other}" if other else "")
    kernel_text = str(len({k.name for k in report.kernels})) if kernels else "-"
    return (report.file_format, _sass_text(report), _ptx_text(report), _compression_text(report), images,
            kernel_text)


def _render_listing_grouped(reports: Sequence[BinaryReport], names: dict[str, str], console: Console,
                            kernels: bool) -> None:
    groups: dict[tuple[str, ...], list[str]] = {}
    for report in reports:
        key = (("fatal", report.label, report.fatal or "") if report.fatal else _listing_cells(report, kernels))
        groups.setdefault(key, []).append(report.label)
    table = Table(title="opgate inspect: device code per file", show_lines=False, expand=False)
    table.add_column("file", style="cyan", overflow="fold", min_width=12, ratio=2)
    table.add_column("format", no_wrap=True)
    table.add_column("SASS (cubins)", overflow="fold", ratio=1)
    table.add_column("PTX", overflow="fold", ratio=1)
    table.add_column("compression", overflow="fold")
    table.add_column("images", justify="right", no_wrap=True)
    table.add_column("kernels", justify="right", no_wrap=True)
    by_label = {r.label: r for r in reports}
    for key, labels in groups.items():
        if key[0] == "fatal":
            report = by_label[labels[0]]
            table.add_row(names[report.label], report.file_format or "?",
                          Text(f"unreadable: {report.fatal}", "magenta"), "", "", "", "")
            continue
        table.add_row(_grouped(labels, names, False), *key)
    console.print(table)
    if not kernels:
        console.print("images = SASS+PTX entries; kernel counts need --kernels (which decompresses the cubins)",
                      style="dim")
    if len(groups) < len(reports):
        console.print(f"{len(reports)} files in {len(groups)} rows (identical rows share one); every file: -v "
                      "or --json", style="dim")
    errors = [(names[r.label], error) for r in reports for error in r.errors]
    for name, error in errors[:10]:
        console.print(Text(f"{name}: {error}", style="magenta"))
    if len(errors) > 10:
        console.print(Text(f"... {len(errors) - 10} more read errors: -v or --json", "magenta"))


# rich lays out each table cell; past a few hundred rows that takes seconds, so long kernel lists are
# printed as plain aligned columns instead.
RICH_KERNEL_ROWS = 300
KERNEL_COLUMNS = ("arch", "registers", "static smem B", "stack B", "local B", "max threads", "params B", "kernel")


def _kernel_row(kernel) -> tuple[str, ...]:
    stack = kernel.max_stack_bytes if kernel.max_stack_bytes is not None else kernel.stack_frame_bytes
    return (f"sm_{kernel.sm}{kernel.suffix}", _num(kernel.registers), _num(kernel.static_shared_bytes), _num(stack),
            _num(kernel.local_bytes), _num(kernel.max_threads), _num(kernel.param_bytes), kernel.demangled)


def render_kernels(reports: Sequence[BinaryReport], console: Console) -> None:
    for report in reports:
        if not report.kernels:
            continue
        title = f"kernels: {display_names([report])[report.label]} ({len(report.kernels)} kernel images)"
        rows = [_kernel_row(k) for k in report.kernels]
        if len(rows) > RICH_KERNEL_ROWS:
            widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(KERNEL_COLUMNS[:-1])]
            console.print(title, style="bold")
            console.out("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                                  enumerate(zip(KERNEL_COLUMNS, widths))) + "  kernel", highlight=False)
            for row in rows:
                console.out("  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths)))
                            + "  " + row[-1], highlight=False)
            continue
        table = Table(title=title, expand=False)
        for column in KERNEL_COLUMNS:
            table.add_column(column, justify="left" if column in ("arch", "kernel") else "right",
                             overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print(table)


def _num(value: int | None) -> str:
    return "-" if value is None else str(value)


def render_verdicts(reports: Sequence[BinaryReport], targets: Sequence[Target], verdicts: Sequence[Verdict],
                    console: Console, verbose: bool = False) -> None:
    names = display_names(reports)
    if not verbose:
        _render_verdicts_grouped(reports, targets, verdicts, names, console)
        return
    table = Table(title="fleet verdict", expand=False, show_lines=False)
    table.add_column("file", style="cyan", overflow="fold", min_width=12)
    for target in targets:
        header = f"{target.label}\nsm_{target.sm}" + (f" @{target.driver}" if target.driver else "")
        table.add_column(header, no_wrap=True)
    by_key = {(v.binary, v.target.label): v for v in verdicts}
    for report in reports:
        cells = []
        for target in targets:
            verdict = by_key[(report.label, target.label)]
            label, style, _ = STATUS_STYLE[verdict.status]
            cells.append(Text(label + ("*" if verdict.warnings else ""), style=style))
        table.add_row(names[report.label], *cells)
    console.print(table)
    for verdict in verdicts:
        name = names.get(verdict.binary, verdict.binary)
        if verdict.status in (JIT, UNSUPPORTED, UNREADABLE):
            console.print(Text(f"{verdict.status.upper()} {name} on {verdict.target.label}: {verdict.reason}",
                               style=STATUS_STYLE[verdict.status][1]))
        for warning in verdict.warnings:
            if warning not in verdict.reason:
                console.print(Text(f"* {name} on {verdict.target.label}: {warning}", style="yellow"))


def _render_verdicts_grouped(reports: Sequence[BinaryReport], targets: Sequence[Target],
                             verdicts: Sequence[Verdict], names: dict[str, str], console: Console) -> None:
    """One row per set of files with the same verdict on every target; one line per distinct reason."""
    by_key = {(v.binary, v.target.label): v for v in verdicts}
    rows: dict[tuple[tuple[str, bool], ...], list[str]] = {}
    for report in reports:
        cells = tuple((by_key[(report.label, t.label)].status, bool(by_key[(report.label, t.label)].warnings))
                      for t in targets)
        rows.setdefault(cells, []).append(report.label)
    table = Table(title="fleet verdict", expand=False, show_lines=False)
    table.add_column("file", style="cyan", overflow="fold", min_width=12)
    for target in targets:
        header = f"{target.label}\nsm_{target.sm}" + (f" @{target.driver}" if target.driver else "")
        table.add_column(header, no_wrap=True)
    for cells, labels in rows.items():
        texts = []
        for status, warned in cells:
            label, style, _ = STATUS_STYLE[status]
            texts.append(Text(label + ("*" if warned else ""), style=style))
        table.add_row(_grouped(labels, names, False), *texts)
    console.print(table)
    lines: dict[tuple[str, str, str], list[str]] = {}
    for verdict in verdicts:
        if verdict.status in (JIT, UNSUPPORTED, UNREADABLE):
            lines.setdefault((verdict.status, verdict.target.label, verdict.reason), []).append(verdict.binary)
        for warning in verdict.warnings:
            if warning not in verdict.reason:
                lines.setdefault(("*", verdict.target.label, warning), []).append(verdict.binary)
    for (status, target, reason), labels in lines.items():
        style = "yellow" if status == "*" else STATUS_STYLE[status][1]
        head = "*" if status == "*" else status.upper()
        console.print(Text(f"{head} {_grouped(labels, names, False)} on {target}: {reason}", style=style))
    if any(len(labels) > 1 for labels in rows.values()):
        console.print("files with the same verdicts share a row; every file and verdict: -v or --json", style="dim")


# -- reports -----------------------------------------------------------------------------------------------

def verdict_result(verdict: Verdict) -> CheckResult:
    _, _, outcome = STATUS_STYLE[verdict.status]
    if verdict.status == NATIVE and verdict.warnings:
        outcome = Outcome.WARNED
    safe = verdict.binary.replace(".", "_")
    remediation = ""
    if verdict.status == UNSUPPORTED:
        remediation = (f"rebuild with -gencode arch=compute_{verdict.target.sm},code=sm_{verdict.target.sm} "
                       "(or ship PTX the fleet driver can JIT), or upgrade the driver if the PTX is too new")
    elif verdict.status == JIT:
        remediation = f"add SASS for the target: -gencode arch=compute_{verdict.target.sm},code=sm_{verdict.target.sm}"
    reason = verdict.reason + "".join(f"; {w}" for w in verdict.warnings)
    return CheckResult(
        check_id=f"inspect.{safe}@{verdict.target.label}",
        title=f"{verdict.binary} on {verdict.target.label}",
        outcome=outcome,
        reason=reason,
        figures=(Figure("verdict", verdict.status, key="inspect.verdict"),
                 Figure("target sm", verdict.target.sm, key="inspect.target_sm"),
                 Figure("SASS serving", ", ".join(verdict.sass) or "none", key="inspect.sass_serving"),
                 Figure("PTX serving", ", ".join(verdict.ptx) or "none", key="inspect.ptx_serving")),
        remediation=remediation,
        extra=verdict.to_dict(),
        labels={"binary": verdict.binary, "target": verdict.target.label},
    )


def to_run_report(reports: Sequence[BinaryReport], targets: Sequence[Target], verdicts: Sequence[Verdict],
                  started_at: str, duration: float, code: int | None = None) -> RunReport:
    from opgate import __version__
    from opgate.engine.session import host_facts

    return RunReport(
        verb="inspect",
        results=tuple(verdict_result(v) for v in verdicts if v.status != NO_DEVICE_CODE),
        started_at=started_at,
        duration_s=duration,
        host=host_facts(),
        tool_version=__version__,
        extra={
            "binaries": [r.to_dict() for r in reports],
            "targets": [t.to_dict() for t in targets],
            "verdicts": [v.to_dict() for v in verdicts],
        },
        input_errors=tuple(f"{r.path}: {r.fatal}" for r in reports if r.fatal),
    )
