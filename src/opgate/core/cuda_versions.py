"""CUDA version arithmetic over the data tables: which driver runs which runtime, which PTX it can JIT.

Pure functions of versions; the tables (data/*.toml) carry the facts and their sources.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from opgate.data import load_table

CudaVersion = tuple[int, int]


def parse_version(text: str) -> tuple[int, ...]:
    """"580.65.06" -> (580, 65, 6); "13.0" -> (13, 0). Raises ValueError on anything else."""
    parts = text.strip().split(".")
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"{text!r} is not a dotted version number")
    return tuple(int(p) for p in parts)


def format_cuda(version: CudaVersion) -> str:
    return f"{version[0]}.{version[1]}"


def ptx_isa_for_cuda(cuda: CudaVersion) -> tuple[tuple[int, int], str] | None:
    """The newest PTX ISA a CUDA release emits (and a driver of that CUDA version can JIT), with its source."""
    best = None
    for row in load_table("ptx_isa"):
        row_cuda = parse_version(row["cuda"])[:2]
        if row_cuda <= cuda and (best is None or row_cuda >= best[0]):
            best = (row_cuda, row)
    if best is None:
        return None
    isa = parse_version(best[1]["ptx_isa"])[:2]
    return (isa[0], isa[1]), best[1]["source"]


def min_driver_for_cuda(cuda: CudaVersion) -> tuple[str, str] | None:
    """Minimum Linux driver giving CUDA `cuda` natively (release-notes Table 3), with the source."""
    for row in load_table("cuda_toolkit_drivers"):
        if parse_version(row["cuda"])[:2] == cuda:
            return row["linux_min_driver"], row["source"]
    return None


def cuda_for_driver(driver: str) -> CudaVersion | None:
    """The newest CUDA release whose minimum driver is <= `driver` (e.g. 580.159.03 -> 13.0)."""
    have = parse_version(driver)
    best = None
    for row in load_table("cuda_toolkit_drivers"):
        if parse_version(row["linux_min_driver"]) <= have:
            cuda = parse_version(row["cuda"])[:2]
            best = cuda if best is None or cuda > best else best
    return best  # type: ignore[return-value]


def mvc_floor(major: int) -> dict | None:
    for row in load_table("cuda_minor_version_compat"):
        if row["cuda_major"] == major:
            return row
    return None


class Compat(str, enum.Enum):
    NATIVE = "native"
    MINOR_VERSION = "minor-version compatibility"
    FORWARD_COMPAT = "needs forward-compat package"
    INCOMPATIBLE = "incompatible"


@dataclass(frozen=True)
class RuntimeVerdict:
    compat: Compat
    detail: str
    limits: tuple[str, ...] = ()
    ptx_jit_risk: str = ""  # non-empty when this runtime's toolkit emits PTX the driver cannot JIT
    sources: tuple[str, ...] = ()


def classify_runtime(driver_cuda: CudaVersion, runtime_cuda: CudaVersion, driver_version: str | None = None) -> RuntimeVerdict:
    """How a driver that supports CUDA `driver_cuda` runs a runtime of CUDA `runtime_cuda`."""
    sources: list[str] = []
    risk = ""
    runtime_isa = ptx_isa_for_cuda(runtime_cuda)
    driver_isa = ptx_isa_for_cuda(driver_cuda)
    if runtime_isa and driver_isa and runtime_isa[0] > driver_isa[0]:
        risk = (f"PTX from CUDA {format_cuda(runtime_cuda)} is ISA {format_cuda(runtime_isa[0])}; this driver JITs "
                f"at most ISA {format_cuda(driver_isa[0])}: kernels shipped only as such PTX fail with "
                "cudaErrorUnsupportedPtxVersion (222)")
        sources += [runtime_isa[1], driver_isa[1]]

    if runtime_cuda <= driver_cuda:
        return RuntimeVerdict(Compat.NATIVE, f"driver supports CUDA {format_cuda(driver_cuda)} "
                              f">= runtime {format_cuda(runtime_cuda)}", ptx_jit_risk=risk, sources=tuple(sources))

    needed = min_driver_for_cuda(runtime_cuda)
    upgrade = f"driver >= {needed[0]}" if needed else f"a driver for CUDA {format_cuda(runtime_cuda)}"
    if needed:
        sources.append(needed[1])
    if runtime_cuda[0] == driver_cuda[0]:
        floor = mvc_floor(runtime_cuda[0])
        if floor:
            sources.append(floor["source"])
        if floor and driver_version and parse_version(driver_version) < parse_version(floor["min_driver"]):
            return RuntimeVerdict(
                Compat.INCOMPATIBLE,
                f"driver {driver_version} is below the CUDA {runtime_cuda[0]}.x minor-version floor "
                f"{floor['min_driver']}; upgrade to {upgrade}", ptx_jit_risk=risk, sources=tuple(sources))
        limits = (
            f"features new after CUDA {format_cuda(driver_cuda)} return cudaErrorCallRequiresNewerDriver",
            "PTX newer than the driver's ISA cannot be JIT-compiled",
        )
        return RuntimeVerdict(
            Compat.MINOR_VERSION,
            f"runtime {format_cuda(runtime_cuda)} on a CUDA {format_cuda(driver_cuda)} driver runs through "
            f"minor-version compatibility (limited features); full support needs {upgrade}",
            limits=limits, ptx_jit_risk=risk, sources=tuple(sources))
    if runtime_cuda[0] > driver_cuda[0]:
        return RuntimeVerdict(
            Compat.FORWARD_COMPAT,
            f"runtime {format_cuda(runtime_cuda)} is a newer major version than the driver's CUDA "
            f"{format_cuda(driver_cuda)}: it needs the cuda-compat forward-compatibility package "
            f"(data-center GPUs only) or {upgrade}", ptx_jit_risk=risk, sources=tuple(sources))
    return RuntimeVerdict(Compat.INCOMPATIBLE, "unrecognised version combination", ptx_jit_risk=risk,
                          sources=tuple(sources))
