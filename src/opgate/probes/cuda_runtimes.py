"""Find the CUDA driver's version and every CUDA runtime this environment could load.

Runtimes come from: pip wheels (nvidia-cuda-runtime, nvidia/cu13), frameworks' bundled copies
(torch/lib), the system toolkit (/usr/local/cuda*), the dynamic linker cache, and cuda-bindings'
own runtime module. Versions are asked of each library (cudaRuntimeGetVersion needs no GPU).
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from opgate.probes.libraries import ldconfig_libraries

SYSTEM_LIB_GLOBS = (
    "/usr/local/cuda*/lib64/libcudart.so*",
    "/usr/local/cuda*/lib/libcudart.so*",
    "/usr/local/cuda*/targets/*/lib/libcudart.so*",
    "/usr/lib/x86_64-linux-gnu/libcudart.so*",
    "/usr/lib/aarch64-linux-gnu/libcudart.so*",
    "/usr/lib64/libcudart.so*",
)
SITE_LIB_GLOBS = ("nvidia/*/lib/libcudart.so*", "torch/lib/libcudart*.so*", "jaxlib/**/libcudart.so*")


@dataclass(frozen=True)
class DriverVersion:
    cuda_version: int | None  # cuDriverGetVersion, e.g. 13000
    driver_version: str | None  # e.g. "580.159.03" from NVML, when available
    reason: str = ""  # why a field is missing

    @property
    def cuda(self) -> tuple[int, int] | None:
        return split_cuda_version(self.cuda_version) if self.cuda_version else None


@dataclass(frozen=True)
class RuntimeCopy:
    path: str
    origin: str
    version: int | None  # cudaRuntimeGetVersion, e.g. 13050
    error: str = ""

    @property
    def cuda(self) -> tuple[int, int] | None:
        return split_cuda_version(self.version) if self.version else None


def split_cuda_version(value: int) -> tuple[int, int]:
    """CUDA encodes versions as 1000*major + 10*minor (13050 -> 13.5)."""
    return value // 1000, (value % 1000) // 10


def driver_version() -> DriverVersion:
    reasons = []
    cuda_version = None
    try:
        from cuda.bindings import driver

        err, value = driver.cuDriverGetVersion()
        if int(err) == 0:
            cuda_version = int(value)
        else:
            reasons.append(f"cuDriverGetVersion returned {err}")
    except Exception as exc:  # no libcuda.so.1: cuda-bindings raises its own not-found error
        reasons.append(f"no NVIDIA driver: libcuda.so.1 could not be loaded ({type(exc).__name__})")
    nvml_version = None
    try:
        from opgate.probes.nvml import NvmlUnavailable, is_available, nvml_session, query

        with nvml_session() as nv:
            value = query(nv.nvmlSystemGetDriverVersion)
            nvml_version = str(value) if is_available(value) else None
    except NvmlUnavailable as exc:
        reasons.append(str(exc))
    return DriverVersion(cuda_version, nvml_version, "; ".join(reasons))


def _site_dirs() -> list[Path]:
    dirs = []
    for entry in sys.path:
        path = Path(entry)
        if path.is_dir() and path.name in ("site-packages", "dist-packages"):
            dirs.append(path)
    return dirs


def _origin(path: str) -> str:
    if "/torch/lib/" in path:
        return "torch (bundled)"
    if "/site-packages/nvidia/" in path or "/dist-packages/nvidia/" in path:
        return "pip wheel (" + path.split("/nvidia/")[1].split("/")[0] + ")"
    if "/site-packages/" in path:
        return "pip package (" + path.split("/site-packages/")[1].split("/")[0] + ")"
    if path.startswith("/usr/local/cuda"):
        return "system toolkit"
    return "system library"


def runtime_version_of(path: str) -> tuple[int | None, str]:
    """Load one libcudart and ask its version. Returns (version, error)."""
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
        value = ctypes.c_int(0)
        status = lib.cudaRuntimeGetVersion(ctypes.byref(value))
    except (OSError, AttributeError) as exc:
        return None, f"could not load: {exc}"
    if status != 0:
        return None, f"cudaRuntimeGetVersion returned error {status}"
    return value.value, ""


_SONAME_RE = re.compile(r"libcudart(?:64_\d+)?\.so(\.\d+)*$")


def find_runtime_libraries() -> list[str]:
    """Distinct real files named libcudart.so* this environment could load."""
    candidates: list[str] = []
    for site in _site_dirs():
        for pattern in SITE_LIB_GLOBS:
            candidates += glob.glob(str(site / pattern), recursive=True)
    for pattern in SYSTEM_LIB_GLOBS:
        candidates += glob.glob(pattern)
    candidates += [p for p in ldconfig_libraries() if "libcudart.so" in p]
    seen: dict[str, str] = {}
    for path in candidates:
        if not _SONAME_RE.search(Path(path).name) or not os.path.isfile(path):
            continue
        seen.setdefault(os.path.realpath(path), path)
    return sorted(seen)


def find_runtimes() -> list[RuntimeCopy]:
    copies = []
    for path in find_runtime_libraries():
        version, error = runtime_version_of(path)
        copies.append(RuntimeCopy(path, _origin(path), version, error))
    try:  # cuda-bindings carries a runtime of its own (cuda.bindings.runtime)
        from cuda.bindings import runtime

        err, value = runtime.cudaRuntimeGetVersion()
        import cuda.bindings as bindings

        copies.append(RuntimeCopy(f"cuda.bindings.runtime (cuda-bindings {bindings.__version__})",
                                  "cuda-bindings", int(value) if int(err) == 0 else None,
                                  "" if int(err) == 0 else str(err)))
    except Exception:  # cuda-bindings absent or broken: nothing to report for it
        pass
    return copies
