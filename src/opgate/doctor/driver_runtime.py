"""Check 2: the driver's CUDA version against every CUDA runtime this environment would load."""

from __future__ import annotations

from opgate.checks.base import Check, CheckContext
from opgate.model.errors import SkipCheck
from opgate.gpu.judge.driver_runtime import runtime_outcome
from opgate.model.results import CheckResult, Figure, Outcome, Threshold, slug, worst_outcome

class DriverRuntimeCheck(Check):
    check_id = "doctor.driver_runtime"
    title = "Driver vs CUDA runtimes"
    timeout_s = 60.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.core.cuda_versions import classify_runtime, cuda_for_driver, format_cuda
        from opgate.probes.cuda_runtimes import driver_version, find_runtimes

        runtimes = find_runtimes()
        found = ", ".join(f"{format_cuda(r.cuda)} ({r.origin})" for r in runtimes if r.cuda) or "none"
        driver = driver_version()
        driver_cuda = driver.cuda or (cuda_for_driver(driver.driver_version) if driver.driver_version else None)
        if driver_cuda is None:
            raise SkipCheck(f"{driver.reason or 'driver version unknown'}; CUDA runtimes on disk: {found}")

        figures = [Figure("driver CUDA version", format_cuda(driver_cuda), key="driver_runtime.driver_cuda_version"),
                   Figure("driver version", driver.driver_version or "n/a", key="driver_runtime.driver_version")]
        outcomes, findings, verdicts = [], [], []
        for copy in runtimes:
            if copy.cuda is None:
                outcomes.append(Outcome.WARNED)
                findings.append(f"{copy.path}: version unknown ({copy.error})")
                continue
            verdict = classify_runtime(driver_cuda, copy.cuda, driver.driver_version)
            outcome = runtime_outcome(verdict.compat.value, verdict.ptx_jit_risk)
            outcomes.append(outcome)
            label = f"runtime {format_cuda(copy.cuda)} ({copy.origin})"
            figures.append(Figure(label, verdict.compat.value,
                                  threshold=Threshold(format_cuda(driver_cuda), "<=", "; ".join(verdict.sources)
                                                      or "CUDA compatibility guide"),
                                  key=f"driver_runtime.runtime_{slug(format_cuda(copy.cuda))}_{slug(copy.origin)}"))
            if outcome is not Outcome.PASSED:
                findings.append(f"{label}: {verdict.compat.value}" +
                                (f" — {verdict.ptx_jit_risk}" if verdict.ptx_jit_risk else ""))
            verdicts.append({"path": copy.path, "origin": copy.origin, "runtime": format_cuda(copy.cuda),
                             "compat": verdict.compat.value, "detail": verdict.detail,
                             "limits": list(verdict.limits), "ptx_jit_risk": verdict.ptx_jit_risk,
                             "sources": list(verdict.sources)})
        if not runtimes:
            return self.passed(f"driver supports CUDA {format_cuda(driver_cuda)}; no CUDA runtime found to load",
                               figures=figures)
        outcome = worst_outcome(outcomes)
        reason = (f"driver CUDA {format_cuda(driver_cuda)}; {len(runtimes)} runtime(s)"
                  + (": all native" if outcome is Outcome.PASSED else ": " + "; ".join(findings)))
        remediation = ""
        if outcome is not Outcome.PASSED:
            remediation = ("Upgrade the driver to the runtime's minimum (see the JSON report's per-runtime detail), "
                           "or pin the runtime wheels to the driver's CUDA version; ship SASS for your GPUs "
                           "so no PTX JIT is needed.")
        return self.result(outcome, reason, figures=figures, remediation=remediation,
                           extra={"runtimes": verdicts})
