"""The system CUDA toolkit (nvcc) and what the Python frameworks were built for."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ToolkitInfo:
    nvcc_path: str | None
    release: tuple[int, int] | None
    reason: str = ""


@dataclass(frozen=True)
class FrameworkBuild:
    name: str
    version: str
    cuda: str | None  # the CUDA version the framework was built with, None for CPU builds
    arch_list: list[str] = field(default_factory=list)
    error: str = ""


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for candidate in ("/usr/local/cuda/bin/nvcc",):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def toolkit_info() -> ToolkitInfo:
    nvcc = find_nvcc()
    if nvcc is None:
        return ToolkitInfo(None, None, "nvcc not found on PATH or in /usr/local/cuda/bin")
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return ToolkitInfo(nvcc, None, f"nvcc --version failed: {exc}")
    match = re.search(r"release (\d+)\.(\d+)", out)
    if not match:
        return ToolkitInfo(nvcc, None, "nvcc --version printed no release number")
    return ToolkitInfo(nvcc, (int(match.group(1)), int(match.group(2))))


def torch_build() -> FrameworkBuild | None:
    """torch's CUDA build facts; None when torch is not installed. Imports torch (run in a child)."""
    try:
        import torch
    except ImportError:
        return None
    except Exception as exc:  # a broken install is a finding, not a crash
        return FrameworkBuild("torch", "?", None, error=f"import failed: {type(exc).__name__}: {exc}")
    cuda = getattr(torch.version, "cuda", None)
    arch_list: list[str] = []
    if cuda:
        try:
            arch_list = list(torch.cuda.get_arch_list()) or _compiled_arch_flags(torch)
        except Exception as exc:
            return FrameworkBuild("torch", torch.__version__, cuda, error=f"get_arch_list failed: {exc}")
    return FrameworkBuild("torch", torch.__version__, cuda, arch_list)


def _compiled_arch_flags(torch: object) -> list[str]:
    """The architectures torch's CUDA code was compiled for, read without a device. get_arch_list() returns []
    when CUDA is not available (torch 2.11 asks is_available() first), and a node whose pods get
    CUDA_VISIBLE_DEVICES="" still lists its GPUs through NVML: its empty list read as "no code for sm_90"
    (the fleet run on the H200 host, 2026-12-03). [] when the private accessor is absent too."""
    read = getattr(getattr(torch, "_C", None), "_cuda_getArchFlags", None)
    try:
        flags = read() if callable(read) else None
    except Exception:  # a private accessor: any failure means "not known", never a finding
        return []
    return flags.split() if isinstance(flags, str) else []
