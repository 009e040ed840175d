"""Pure judging of a CUDA runtime against the driver: the outcome of each compatibility class that
opgate.core.cuda_versions.classify_runtime names. The doctor's `doctor.driver_runtime` check (opgate.doctor.driver_runtime)
finds the runtimes and calls it."""

from __future__ import annotations

from opgate.model.results import Outcome


COMPAT_OUTCOME = {
    "native": Outcome.PASSED,
    "minor-version compatibility": Outcome.WARNED,
    "needs forward-compat package": Outcome.FAILED,
    "incompatible": Outcome.FAILED,
}


def runtime_outcome(compat: str, ptx_jit_risk: str) -> Outcome:
    """One runtime's outcome: its compatibility class's, and warned at least when its toolkit emits PTX this driver
    cannot JIT-compile (`ptx_jit_risk` says why)."""
    outcome = COMPAT_OUTCOME[compat]
    return Outcome.WARNED if ptx_jit_risk and outcome is Outcome.PASSED else outcome
