"""Check 4: the CUDA libraries a framework process really loads, and their copies on disk."""

from __future__ import annotations

from opgate.checks.base import Check, CheckContext
from opgate.gpu.judge.library_stack import judge_framework_builds, judge_loaded
from opgate.model.results import CheckResult, Figure, Outcome, slug, worst_outcome


class LibraryStackCheck(Check):
    check_id = "doctor.library_stack"
    title = "Loaded CUDA library stack"
    timeout_s = 120.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        import platform

        from opgate.probes.framework_builds import bundled_components
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
        stack_problem = bool(findings or failed_imports)  # the CUDA libraries' remedy applies
        bundled = bundled_components()
        figures += [Figure(f"{c.framework} bundles {c.component}", c.version,
                           key=f"library_stack.{slug(c.framework + ' bundles ' + c.component)}") for c in bundled]
        build_outcome, build_findings, build_remedies = judge_framework_builds(bundled, platform.machine())
        outcome = worst_outcome([outcome, build_outcome])
        findings += build_findings
        if failed_imports:
            outcome = worst_outcome([outcome, Outcome.WARNED])
            findings += [f"import {k} failed: {v}" for k, v in failed_imports.items()]
        what = ", ".join(frameworks) if frameworks else "no framework"
        if not loaded:
            summary = f"after importing {what}: no CUDA library is loaded"
        else:
            summary = f"after importing {what}: " + ", ".join(sorted({f'{l.family} {l.version}' for l in loaded}))
        reason = summary if not findings else summary + "; " + "; ".join(findings)
        remedies = ["Keep one copy of each CUDA library per process: remove stray LD_LIBRARY_PATH entries or duplicate "
                    "nvidia-* wheels, and install library wheels of the runtime's CUDA major."] if stack_problem else []
        return self.result(
            outcome, reason, figures=figures,
            remediation="" if outcome is Outcome.PASSED else " ".join(remedies + build_remedies),
            extra={"frameworks": imported, "loaded": [lib.__dict__ for lib in loaded], "disk_copies": copies,
                   "bundled": [c.__dict__ for c in bundled]},
        )
