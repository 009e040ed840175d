"""Pure judging of the CUDA libraries one process loads (opgate.probes.libraries): two copies of one library, or a
major version that disagrees with the runtime's. Recorded maps test it. The doctor's `doctor.library_stack` check
(opgate.doctor.library_stack) collects and calls it."""

from __future__ import annotations

from collections import defaultdict

from opgate.probes.framework_builds import BundledComponent
from opgate.probes.libraries import LoadedLibrary
from opgate.model.results import Outcome, worst_outcome


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


def _version_within(version: str, prefix: str) -> bool:
    return version == prefix or version.startswith(prefix + ".")


def judge_framework_builds(components: list[BundledComponent], machine: str) -> tuple[Outcome, list[str], list[str]]:
    """Warn on a bundled library at a version with a known defect on this machine (data/framework_defects.toml):
    the outcome, one finding per match (what goes wrong and its source) and the remedies. Pure."""
    from opgate.data import load_table

    findings, remedies = [], []
    for component in components:
        for row in load_table("framework_defects"):
            if (row["framework"] == component.framework and row["component"] == component.component
                    and machine in row["machines"]
                    and any(_version_within(component.version, v) for v in row["versions"])):
                findings.append(f"{component.framework} {component.framework_version} bundles {component.component} "
                                f"{component.version}: {row['effect']} ({row['issue']})")
                remedies.append(row["remedy"])
    return (Outcome.WARNED if findings else Outcome.PASSED), findings, remedies
