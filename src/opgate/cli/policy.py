"""Make skips fail, for GPU hosts' CI: `--fail-on-skip` and `--require-gpu`.

By default a check that cannot run here is `skipped` and the run still exits 0 (a CPU laptop is not a
broken stack). On a GPU host a skip usually means the GPU went missing (a container without
`--gpus`, a driver that did not load); these two options turn that into exit 1 with the reason.
"""

from __future__ import annotations

import dataclasses

from opgate.model.results import CheckResult, Outcome, RunReport

REQUIRE_GPU_ID = "gpu.required"


def _skip_as_failure(result: CheckResult, option: str) -> CheckResult:
    return dataclasses.replace(
        result, outcome=Outcome.FAILED, reason=f"skipped, and {option} makes a skip a failure: {result.reason}",
        remediation=result.remediation or "make the check runnable here, or drop " + option,
        extra={**dict(result.extra), "skipped_reason": result.reason, "failed_by": option},
    )


def gpu_missing_reason() -> str | None:
    """None when NVML sees at least one NVIDIA GPU; else why not (no driver, no device)."""
    from opgate.gpu.probes.device import gpu_unavailable_reason

    return gpu_unavailable_reason(runtime=False)  # NVML only: cheap, no CUDA context in the parent


def apply_skip_policy(report: RunReport, fail_on_skip: bool, require_gpu: bool) -> RunReport:
    """--fail-on-skip: every skipped result becomes failed. --require-gpu: a missing GPU is a failed result
    of its own, and every skip then fails too (each of them would have needed the GPU)."""
    results = list(report.results)
    option = "--fail-on-skip" if fail_on_skip else "--require-gpu"
    if require_gpu:
        missing = gpu_missing_reason()
        if missing is None:
            results.append(CheckResult(REQUIRE_GPU_ID, "an NVIDIA GPU is visible", Outcome.PASSED,
                                       "NVML sees at least one NVIDIA GPU (--require-gpu)"))
        else:
            results.append(CheckResult(REQUIRE_GPU_ID, "an NVIDIA GPU is visible", Outcome.FAILED,
                                       f"--require-gpu: {missing}",
                                       remediation="run on a GPU host with the NVIDIA driver loaded (in a "
                                                   "container: --gpus all / the NVIDIA container runtime)"))
            fail_on_skip = True
    if fail_on_skip:
        results = [_skip_as_failure(r, option) if r.outcome is Outcome.SKIPPED else r for r in results]
    return dataclasses.replace(report, results=tuple(results),
                               extra={**dict(report.extra), "fail_on_skip": fail_on_skip, "require_gpu": require_gpu})
