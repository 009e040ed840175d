"""`opgate inspect --compare A B`: two builds of the same sources (nvcc and clang, two nvcc versions, two
flag sets) side by side, kernel by kernel, and the differences that matter called out.

Per demangled kernel and build: the SASS architectures and PTX (virtual arch, ISA) that carry it, the
compression of those images, registers / spills / static shared memory per SASS architecture, and the
fleet verdict of that kernel's images on every target (the same rules as `opgate inspect`, `compat.judge`).

What is called out (a `CompareFinding`):
- breaks (exit 1): a kernel one build lacks; a kernel a build cannot run on a fleet target (no SASS and no
  PTX the target's driver can JIT, e.g. PTX of an ISA newer than the fleet's driver knows).
- differs (warning): a SASS architecture one build has for a kernel and the other lacks; a target one build
  serves natively and the other only through PTX JIT; PTX ISA versions that need different drivers; register
  use more than REGISTER_MARGIN apart; spills in one build only; different static shared memory.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from opgate.inspect.compat import JIT, NATIVE, UNSUPPORTED, Target, Verdict, judge, min_driver_for_ptx
from opgate.inspect.fatbin import PayloadError, entry_payload, strip_ptx_padding
from opgate.inspect.model import KIND_PTX, KIND_SASS, BinaryReport, FatbinEntry, KernelResources
from opgate.inspect.ptx import parse_ptx

if TYPE_CHECKING:
    from opgate.reporting.emit import ReportOutputs

# Register use further apart than this (relative to the smaller count) is called out. Not a vendor figure:
# the margin (#19); 25% more registers is where a 64-warp SM typically loses a block of occupancy.
REGISTER_MARGIN = 0.25

BREAKS = "breaks"
DIFFERS = "differs"


@dataclass(frozen=True)
class KernelBuild:
    """One kernel as one build carries it."""

    name: str  # mangled
    demangled: str
    sass: tuple[str, ...]  # SASS architectures with this kernel, e.g. ("sm_80", "sm_90")
    ptx: tuple[str, ...]  # "compute_90 (ISA 9.0)"
    ptx_isas: tuple[str, ...]
    compression: tuple[str, ...]  # compression kinds of the images that carry it
    resources: tuple[KernelResources, ...]  # one per SASS image
    verdicts: tuple[Verdict, ...]  # one per target
    ptx_per_kernel: bool = True  # False: PTX text unreadable, the binary's PTX is assumed to carry it

    def resources_for(self, arch: str) -> KernelResources | None:
        return next((r for r in self.resources if f"sm_{r.sm}{r.suffix}" == arch), None)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "demangled": self.demangled, "sass": list(self.sass), "ptx": list(self.ptx),
                "ptx_isas": list(self.ptx_isas), "compression": list(self.compression),
                "resources": [r.to_dict() for r in self.resources],
                "verdicts": [v.to_dict() for v in self.verdicts], "ptx_per_kernel": self.ptx_per_kernel}


@dataclass(frozen=True)
class CompareFinding:
    severity: str  # BREAKS | DIFFERS
    kernel: str  # demangled name
    message: str
    target: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "kernel": self.kernel, "message": self.message, "target": self.target}


@dataclass(frozen=True)
class BuildSide:
    label: str  # the path as given
    reports: tuple[BinaryReport, ...]
    kernels: dict[str, KernelBuild] = field(default_factory=dict)  # by mangled name


@dataclass(frozen=True)
class Comparison:
    a: BuildSide
    b: BuildSide
    targets: tuple[Target, ...]
    kernel_names: tuple[str, ...]  # mangled, in a stable order: both builds', then A's, then B's
    findings: tuple[CompareFinding, ...]

    @property
    def breaks(self) -> bool:
        return any(f.severity == BREAKS for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": {"label": self.a.label, "kernels": {k: v.to_dict() for k, v in self.a.kernels.items()}},
            "b": {"label": self.b.label, "kernels": {k: v.to_dict() for k, v in self.b.kernels.items()}},
            "targets": [t.to_dict() for t in self.targets],
            "findings": [f.to_dict() for f in self.findings],
        }


# -- collect -----------------------------------------------------------------------------------------------

def ptx_kernel_names(report: BinaryReport, entries: Sequence[FatbinEntry]) -> list[tuple[str, ...] | None]:
    """The `.entry` names of each PTX image of a file on disk; None where the text cannot be read (a wheel or
    archive member, a damaged payload)."""
    if report.member is not None:
        return [None] * len(entries)
    found: list[tuple[str, ...] | None] = []
    try:
        with open(report.path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            for entry in entries:
                try:
                    text = strip_ptx_padding(entry_payload(buf, entry)).decode("utf-8", "replace")
                except PayloadError:
                    found.append(None)
                    continue
                found.append(parse_ptx(text).entries)
    except (OSError, ValueError):
        return [None] * len(entries)
    return found


def kernel_builds(reports: Sequence[BinaryReport], targets: Sequence[Target]) -> dict[str, KernelBuild]:
    """Every kernel of these reports (read with kernels=True), with the images that carry it and its verdicts."""
    carriers: dict[str, list[tuple[BinaryReport, FatbinEntry]]] = {}
    resources: dict[str, list[KernelResources]] = {}
    demangled: dict[str, str] = {}
    assumed: set[str] = set()
    for report in reports:
        loaded = report.loaded_entries()
        loaded_ids = {id(e) for e in loaded}
        for kernel in report.kernels:
            if kernel.entry is None or id(report.entries[kernel.entry]) not in loaded_ids:
                continue
            carriers.setdefault(kernel.name, []).append((report, report.entries[kernel.entry]))
            resources.setdefault(kernel.name, []).append(kernel)
            demangled[kernel.name] = kernel.demangled
        report_kernels = {k.name for k in report.kernels}
        ptx_entries = [e for e in loaded if e.kind == KIND_PTX]
        for entry, names in zip(ptx_entries, ptx_kernel_names(report, ptx_entries)):
            if names is None:
                assumed.update(report_kernels)
                names = tuple(report_kernels)
            for name in names:
                carriers.setdefault(name, []).append((report, entry))
                demangled.setdefault(name, name)
    ptx_only = [n for n in carriers if demangled.get(n, n) == n and n.startswith("_Z")]
    if ptx_only:
        from opgate.inspect.demangle import demangle_all

        demangled.update(demangle_all(ptx_only))
    builds = {}
    for name, images in carriers.items():
        entries = [e for _, e in images]
        sub = replace(images[0][0], entries=tuple(entries), kernels=())
        sass = tuple(sorted(dict.fromkeys(e.arch for e in entries if e.kind == KIND_SASS), key=_arch_key))
        ptx_entries = [e for e in entries if e.kind == KIND_PTX]
        builds[name] = KernelBuild(
            name=name,
            demangled=demangled[name],
            sass=sass,
            ptx=tuple(dict.fromkeys(f"{e.virtual_arch} (ISA {e.ptx_isa})" for e in ptx_entries)),
            ptx_isas=tuple(dict.fromkeys(e.ptx_isa or "?" for e in ptx_entries)),
            compression=tuple(sorted({f"{e.kind.upper()}: {e.compression}" for e in entries})),
            resources=tuple(sorted(resources.get(name, []), key=lambda r: (r.sm or 0, r.suffix))),
            verdicts=tuple(judge(sub, t) for t in targets),
            ptx_per_kernel=name not in assumed,
        )
    return builds


def _arch_key(arch: str) -> tuple[int, str]:
    digits = "".join(ch for ch in arch if ch.isdigit())
    return (int(digits) if digits else 0, arch)


def default_targets(a: dict[str, KernelBuild], b: dict[str, KernelBuild]) -> list[Target]:
    """Without --targets/--fleet: every SASS architecture either build carries, no driver given."""
    archs = sorted({arch for side in (a, b) for k in side.values() for arch in k.sass}, key=_arch_key)
    return [Target(arch, int("".join(ch for ch in arch if ch.isdigit()))) for arch in archs]


# -- judge -------------------------------------------------------------------------------------------------

def register_gap(a: int | None, b: int | None) -> float | None:
    """How far apart two register counts are, relative to the smaller one (0.5 = 50% more)."""
    if a is None or b is None or min(a, b) <= 0:
        return None
    return max(a, b) / min(a, b) - 1.0


def _spill_bytes(r: KernelResources) -> int:
    return int(r.local_bytes or 0) + int(r.stack_frame_bytes or 0)


def compare_kernel(name: str, a: KernelBuild | None, b: KernelBuild | None, labels: tuple[str, str],
                   targets: Sequence[Target]) -> list[CompareFinding]:
    """The differences that matter between two builds of one kernel."""
    shown = (a or b).demangled  # type: ignore[union-attr]
    if a is None or b is None:
        missing, present = (labels[0], labels[1]) if a is None else (labels[1], labels[0])
        return [CompareFinding(BREAKS, shown, f"only in {present}: {missing} has no kernel {name}; launching it "
                               "from that build fails with cudaErrorInvalidDeviceFunction / CUDA_ERROR_NOT_FOUND")]
    found: list[CompareFinding] = []
    for arch in sorted(set(a.sass) ^ set(b.sass), key=_arch_key):
        have, lack = (labels[0], labels[1]) if arch in a.sass else (labels[1], labels[0])
        found.append(CompareFinding(DIFFERS, shown, f"{lack} lacks SASS for {arch} ({have} has it)"))
    for index, target in enumerate(targets):
        va, vb = a.verdicts[index], b.verdicts[index]
        for verdict, label in ((va, labels[0]), (vb, labels[1])):
            if verdict.status == UNSUPPORTED:
                found.append(CompareFinding(BREAKS, shown, f"{label} cannot run it on {target.describe()}: "
                                            f"{verdict.reason}", target.label))
        for verdict, label in ((va, labels[0]), (vb, labels[1])):
            too_new = next((w for w in verdict.warnings if "newer than driver" in w), None)
            if too_new and verdict.status != UNSUPPORTED:
                found.append(CompareFinding(DIFFERS, shown, f"{label}'s PTX on {target.label}: {too_new}; SASS "
                                            "serves today, a GPU without that SASS would fail", target.label))
        if {va.status, vb.status} == {NATIVE, JIT}:
            jit = labels[0] if va.status == JIT else labels[1]
            found.append(CompareFinding(DIFFERS, shown, f"on {target.label} {jit} serves it only through PTX JIT "
                                        "(first-launch compile in every process); the other build has SASS",
                                        target.label))
    isas_a, isas_b = set(a.ptx_isas), set(b.ptx_isas)
    if isas_a and isas_b and isas_a != isas_b:
        need_a = [min_driver_for_ptx(i) for i in sorted(isas_a) if i != "?"]
        need_b = [min_driver_for_ptx(i) for i in sorted(isas_b) if i != "?"]
        text_a = "/".join(sorted(isas_a)) + _need(need_a)
        text_b = "/".join(sorted(isas_b)) + _need(need_b)
        found.append(CompareFinding(DIFFERS, shown, f"PTX ISA {text_a} in {labels[0]} vs {text_b} in {labels[1]}"))
    for arch in sorted(set(a.sass) & set(b.sass), key=_arch_key):
        ra, rb = a.resources_for(arch), b.resources_for(arch)
        if ra is None or rb is None:
            continue
        gap = register_gap(ra.registers, rb.registers)
        if gap is not None and gap > REGISTER_MARGIN:
            found.append(CompareFinding(DIFFERS, shown, f"{arch}: registers {ra.registers} ({labels[0]}) vs "
                                        f"{rb.registers} ({labels[1]}), {gap:.0%} apart (margin "
                                        f"{REGISTER_MARGIN:.0%}); occupancy may differ"))
        sa, sb = _spill_bytes(ra), _spill_bytes(rb)
        if (sa == 0) != (sb == 0):
            spiller = labels[0] if sa else labels[1]
            found.append(CompareFinding(DIFFERS, shown, f"{arch}: {spiller} spills to local memory "
                                        f"({max(sa, sb)} B/thread stack+local), the other build does not"))
        if ra.static_shared_bytes != rb.static_shared_bytes:
            found.append(CompareFinding(DIFFERS, shown, f"{arch}: static shared memory {ra.static_shared_bytes} B "
                                        f"({labels[0]}) vs {rb.static_shared_bytes} B ({labels[1]})"))
    return found


def _need(needs: Sequence[tuple[str, str] | None]) -> str:
    known = [n for n in needs if n is not None]
    if not known:
        return ""
    cuda, driver = max(known, key=lambda n: tuple(int(p) for p in n[1].split(".")))
    return f" (driver >= {driver}, CUDA {cuda})"


def compare_builds(a_label: str, a_reports: Sequence[BinaryReport], b_label: str, b_reports: Sequence[BinaryReport],
                   targets: Sequence[Target]) -> Comparison:
    """Compare two builds already read with `inspect_paths(..., kernels=True)`."""
    a_first = kernel_builds(a_reports, targets or [])
    b_first = kernel_builds(b_reports, targets or [])
    chosen = list(targets) or default_targets(a_first, b_first)
    a_kernels = a_first if targets else kernel_builds(a_reports, chosen)
    b_kernels = b_first if targets else kernel_builds(b_reports, chosen)
    both = [n for n in a_kernels if n in b_kernels]
    names = tuple(sorted(both, key=lambda n: a_kernels[n].demangled)
                  + sorted((n for n in a_kernels if n not in b_kernels), key=lambda n: a_kernels[n].demangled)
                  + sorted((n for n in b_kernels if n not in a_kernels), key=lambda n: b_kernels[n].demangled))
    labels = (a_label, b_label)
    findings = [f for n in names for f in compare_kernel(n, a_kernels.get(n), b_kernels.get(n), labels, chosen)]
    return Comparison(BuildSide(a_label, tuple(a_reports), a_kernels), BuildSide(b_label, tuple(b_reports), b_kernels),
                      tuple(chosen), names, tuple(findings))


def short_labels(a: str, b: str) -> tuple[str, str]:
    """File names when they tell the builds apart, else the paths as given."""
    na, nb = Path(a).name, Path(b).name
    return (na, nb) if na != nb else (a, b)


# -- render and report -------------------------------------------------------------------------------------

def _resources_text(build: KernelBuild, what: str) -> str:
    parts = []
    for r in build.resources:
        arch = f"sm_{r.sm}{r.suffix}"
        if what == "registers":
            value = "-" if r.registers is None else str(r.registers)
        elif what == "spills":
            value = f"{_spill_bytes(r)} B"
        else:
            value = f"{r.static_shared_bytes} B"
        parts.append(f"{arch}: {value}")
    return ", ".join(parts) or "-"


def comparison_rows(comparison: Comparison, name: str) -> list[tuple[str, str, str]]:
    """(field, A, B) rows of one kernel: what the table shows and the tests read."""
    a, b = comparison.a.kernels.get(name), comparison.b.kernels.get(name)

    def cell(build: KernelBuild | None, text) -> str:
        return "(absent)" if build is None else text(build)

    rows = [
        ("SASS", cell(a, lambda k: ", ".join(k.sass) or "-"), cell(b, lambda k: ", ".join(k.sass) or "-")),
        ("PTX", cell(a, lambda k: ", ".join(k.ptx) or "-"), cell(b, lambda k: ", ".join(k.ptx) or "-")),
        ("compression", cell(a, lambda k: "; ".join(k.compression)), cell(b, lambda k: "; ".join(k.compression))),
        ("registers", cell(a, lambda k: _resources_text(k, "registers")),
         cell(b, lambda k: _resources_text(k, "registers"))),
        ("spills (stack+local)", cell(a, lambda k: _resources_text(k, "spills")),
         cell(b, lambda k: _resources_text(k, "spills"))),
        ("static shared", cell(a, lambda k: _resources_text(k, "shared")),
         cell(b, lambda k: _resources_text(k, "shared"))),
    ]
    for index, target in enumerate(comparison.targets):
        header = f"on {target.label}" + (f" @{target.driver}" if target.driver else "")
        rows.append((header, cell(a, lambda k: k.verdicts[index].status),
                     cell(b, lambda k: k.verdicts[index].status)))
    return rows


def grouped_findings(findings: Sequence[CompareFinding]) -> dict[tuple[str, str], list[str]]:
    """Findings with the same text for several kernels, once: (severity, message) -> kernels; breaks first."""
    groups: dict[tuple[str, str], list[str]] = {}
    for finding in sorted(findings, key=lambda f: f.severity != BREAKS):
        groups.setdefault((finding.severity, finding.message), []).append(finding.kernel)
    return groups


def render_comparison(comparison: Comparison, console) -> None:
    from rich.table import Table
    from rich.text import Text

    la, lb = comparison.a.label, comparison.b.label
    table = Table(title=f"opgate inspect --compare: {la} vs {lb}", expand=False, show_lines=True)
    table.add_column("kernel", style="cyan", overflow="fold", max_width=40)
    table.add_column("", no_wrap=True)
    table.add_column(la, overflow="fold")
    table.add_column(lb, overflow="fold")
    styles = {NATIVE: "green", JIT: "yellow", UNSUPPORTED: "bold red"}
    for name in comparison.kernel_names:
        build = comparison.a.kernels.get(name) or comparison.b.kernels[name]
        rows = comparison_rows(comparison, name)
        fields = "\n".join(r[0] for r in rows)
        a_text, b_text = Text(), Text()
        for i, (_, va, vb) in enumerate(rows):
            sep = "\n" if i else ""
            a_text.append(sep + va, style=styles.get(va, "" if va == vb else "bold"))
            b_text.append(sep + vb, style=styles.get(vb, "" if va == vb else "bold"))
        table.add_row(build.demangled, fields, a_text, b_text)
    console.print(table)
    for (severity, message), kernels in grouped_findings(comparison.findings).items():
        style = "bold red" if severity == BREAKS else "yellow"
        who = kernels[0] if len(kernels) == 1 else f"{len(kernels)} kernels ({', '.join(kernels)})"
        console.print(Text(f"{severity.upper()} {who}: {message}", style=style))
    if any(not k.ptx_per_kernel for side in (comparison.a, comparison.b) for k in side.kernels.values()):
        console.print("PTX text unreadable for some images: their kernels are assumed to be in every PTX image",
                      style="dim")


def to_run_report(comparison: Comparison, started_at: str, duration: float):
    from opgate import __version__
    from opgate.model.results import CheckResult, Figure, Outcome, RunReport, slug
    from opgate.engine.session import host_facts

    results = []
    for name in comparison.kernel_names:
        build = comparison.a.kernels.get(name) or comparison.b.kernels[name]
        mine = [f for f in comparison.findings if f.kernel == build.demangled]
        outcome = (Outcome.FAILED if any(f.severity == BREAKS for f in mine)
                   else Outcome.WARNED if mine else Outcome.PASSED)
        reason = "; ".join(f.message for f in mine) or "the two builds agree on images, resources and verdicts"
        figures = tuple(Figure(f"{field} ({side})", value, key=f"inspect.{slug(field)}_{slug(side)}")
                        for field, va, vb in comparison_rows(comparison, name)
                        for side, value in ((comparison.a.label, va), (comparison.b.label, vb)))
        # the labels reports have carried for a kernel's row: inspect's BINARY@TARGET layout read from its id
        binary, _, target = f"compare.{name}".rpartition("@")
        results.append(CheckResult(
            check_id=f"inspect.compare.{name}", title=f"{build.demangled}: {comparison.a.label} vs "
            f"{comparison.b.label}", outcome=outcome, reason=reason, figures=figures,
            remediation=("give both builds SASS for every fleet architecture and PTX for the newest, of an ISA the "
                         "fleet's oldest driver can JIT (nvcc -gencode ...; clang --cuda-gpu-arch/--cuda-include-ptx)"
                         if outcome == Outcome.FAILED else ""),
            extra={"findings": [f.to_dict() for f in mine]}, labels={"binary": binary, "target": target}))
    return RunReport(verb="inspect", results=tuple(results), started_at=started_at, duration_s=duration,
                     host=host_facts(), tool_version=__version__, extra={"compare": comparison.to_dict()})


def run_compare(paths: Sequence[Path], targets: Sequence[Target], json_path: Path | None, console,
                junit_path: Path | None = None, outputs: ReportOutputs | None = None) -> int:
    """`opgate inspect --compare A B`: print the comparison, write reports (--html, --markdown and --history from
    `outputs`); 0, 1 (a fleet target breaks), 2."""
    import datetime as _dt
    import time

    from opgate.model.errors import InputError
    from opgate.inspect.sources import inspect_paths
    from opgate.model.results import ExitCode

    if len(paths) != 2:
        raise InputError(f"--compare takes exactly two builds, got {len(paths)} path(s); e.g. "
                         "opgate inspect --compare build-nvcc/lib.so build-clang/lib.so")
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    a_reports = inspect_paths([Path(paths[0])], kernels=True)
    b_reports = inspect_paths([Path(paths[1])], kernels=True)
    for reports, path in ((a_reports, paths[0]), (b_reports, paths[1])):
        fatal = next((r for r in reports if r.fatal), None)
        if fatal is not None:
            raise InputError(f"{fatal.label}: {fatal.fatal}; --compare needs two readable builds")
    la, lb = short_labels(str(paths[0]), str(paths[1]))
    comparison = compare_builds(la, a_reports, lb, b_reports, targets)
    for side, path in ((comparison.a, paths[0]), (comparison.b, paths[1])):
        if not side.kernels:
            raise InputError(f"{path}: no kernels found in its device code; give a build with CUDA kernels "
                             "(an object, library, executable, cubin, fatbin or PTX)")
    duration = time.perf_counter() - t0
    render_comparison(comparison, console)
    code = int(ExitCode.CHECK_FAILED if comparison.breaks else ExitCode.OK)
    from opgate.reporting.emit import ReportOutputs, emit

    wanted = replace(outputs or ReportOutputs(), json=json_path, junit=junit_path)
    if wanted.wanted:
        emit(to_run_report(comparison, started_at, duration), wanted, console.print)
    breaks = sum(1 for f in comparison.findings if f.severity == BREAKS)
    differs = len(comparison.findings) - breaks
    console.print(f"{len(comparison.kernel_names)} kernel(s) compared on {len(comparison.targets)} target(s): "
                  f"{breaks} breaking, {differs} other difference(s) in {duration:.2f}s — exit code {code}")
    return code
