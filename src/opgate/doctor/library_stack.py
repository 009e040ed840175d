"""Check 4: the CUDA libraries a framework process really loads, and their copies on disk."""

from __future__ import annotations

from collections import defaultdict

from opgate.checks.base import Check, CheckContext
from opgate.probes.libraries import LoadedLibrary
from opgate.results import CheckResult, Figure, Outcome, slug, worst_outcome


def judge_loaded(libraries: list[LoadedLibrary]) -> tuple[Outcome, list[str]]:
    """Fail on two different versions of one library in one process; warn on major versions that
    disagree with the runtime's (cudart's) major. Pure: tested with recorded maps."""
    by_family: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for lib in libraries:
        by_family[lib.family].add((lib.version, lib.path))
    outcomes, findings = [], []
    for family, copies in sorted(by_family.items()):
        versions = {v for v, _ in copies}
        if len(copies) > 1 and (len(versions) > 1 or len({p for _, p in copies}) > 1):
            outcomes.append(Outcome.FAILED)
            listing = "; ".join(f"{v or '?'} at {p}" for v, p in sorted(copies))
            findings.append(f"two copies of {family} loaded in one process: {listing}")
    runtime_majors = {lib.major for lib in libraries if lib.family == "cudart" and lib.major}
    if len(runtime_majors) == 1:
        runtime_major = next(iter(runtime_majors))
        for lib in libraries:
            # cuBLAS and NVRTC carry the CUDA major in their soname; cuDNN, NCCL, cuFFT and cuSPARSE
            # version on their own scale (CUDA 13.0 ships cuFFT 12.0 and cuSPARSE 12.6).
            if lib.family in ("cublas", "cublasLt", "nvrtc") and lib.major and lib.major != runtime_major:
                outcomes.append(Outcome.WARNED)
                findings.append(f"{lib.family} {lib.version} is for CUDA {lib.major}, the runtime is CUDA {runtime_major}")
    return (worst_outcome(outcomes) if outcomes else Outcome.PASSED), findings


class LibraryStackCheck(Check):
    check_id = "doctor.library_stack"
    title = "Loaded CUDA library stack"
    timeout_s = 120.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.probes.libraries import default_frameworks, disk_copies, import_frameworks, loaded_cuda_libraries

        frameworks = list(ctx.options.get("frameworks") or default_frameworks())
        imported = import_frameworks(frameworks)
        with open("/proc/self/maps") as handle:
            loaded = loaded_cuda_libraries(handle.read())
        copies = disk_copies()
        figures = [Figure(f"loaded {lib.family}", f"{lib.version or '?'} {lib.path}",
                          key=f"library_stack.loaded_{slug(lib.family)}") for lib in loaded]
        figures += [Figure(f"copies of {family} on disk", len(paths),
                           key=f"library_stack.copies_of_{slug(family)}_on_disk")
                    for family, paths in sorted(copies.items())]
        failed_imports = {k: v for k, v in imported.items() if v != "ok"}
        outcome, findings = judge_loaded(loaded)
        if failed_imports:
            outcome = worst_outcome([outcome, Outcome.WARNED])
            findings += [f"import {k} failed: {v}" for k, v in failed_imports.items()]
        what = ", ".join(frameworks) if frameworks else "no framework"
        if not loaded:
            summary = f"after importing {what}: no CUDA library is loaded"
        else:
            summary = f"after importing {what}: " + ", ".join(sorted({f'{l.family} {l.version}' for l in loaded}))
        reason = summary if not findings else summary + "; " + "; ".join(findings)
        return self.result(
            outcome, reason, figures=figures,
            remediation="" if outcome is Outcome.PASSED else
            "Keep one copy of each CUDA library per process: remove stray LD_LIBRARY_PATH entries or duplicate "
            "nvidia-* wheels, and install library wheels of the runtime's CUDA major.",
            extra={"frameworks": imported, "loaded": [lib.__dict__ for lib in loaded], "disk_copies": copies},
        )
