"""Which CUDA libraries a process has loaded (from /proc/self/maps), and which copies lie on disk."""

from __future__ import annotations

import glob
import importlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# Library families opgate tracks: family -> regex on the file name.
LIBRARY_FAMILIES = {
    "cudart": re.compile(r"^libcudart\.so"),
    "cublas": re.compile(r"^libcublas\.so"),
    "cublasLt": re.compile(r"^libcublasLt\.so"),
    "cudnn": re.compile(r"^libcudnn\.so"),
    "cufft": re.compile(r"^libcufft\.so"),
    "nccl": re.compile(r"^libnccl\.so"),
    "nvrtc": re.compile(r"^libnvrtc\.so"),
    "cusparse": re.compile(r"^libcusparse\.so"),
    "cuda (driver)": re.compile(r"^libcuda\.so"),
}


@dataclass(frozen=True)
class LoadedLibrary:
    family: str
    path: str  # real path of the mapped file
    version: str  # from the file name, e.g. "13.0.96" or "13"

    @property
    def major(self) -> int | None:
        head = self.version.split(".")[0]
        return int(head) if head.isdigit() else None


def family_of(filename: str) -> str | None:
    for family, pattern in LIBRARY_FAMILIES.items():
        if pattern.match(filename):
            return family
    return None


def version_from_filename(filename: str) -> str:
    """"libcublas.so.13.1.0.3" -> "13.1.0.3"; "libcudnn.so.9" -> "9"; "libcudart.so" -> ""."""
    match = re.search(r"\.so\.([\d.]+)$", filename)
    return match.group(1).rstrip(".") if match else ""


def parse_maps(text: str) -> list[str]:
    """Distinct file paths mapped in a /proc/PID/maps text, in first-seen order."""
    paths: dict[str, None] = {}
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            paths.setdefault(parts[5].strip(), None)
    return list(paths)


def loaded_cuda_libraries(maps_text: str) -> list[LoadedLibrary]:
    found = []
    for path in parse_maps(maps_text):
        name = Path(path).name
        family = family_of(name)
        if family is None:
            continue
        real = os.path.realpath(path)
        found.append(LoadedLibrary(family, real, version_from_filename(Path(real).name) or version_from_filename(name)))
    return found


def import_frameworks(names: list[str]) -> dict[str, str]:
    """Import each named module; returns name -> "ok" or the error. Initialising CUDA is the
    frameworks' business: torch loads its CUDA libraries at import."""
    status = {}
    for name in names:
        try:
            importlib.import_module(name)
            status[name] = "ok"
        except Exception as exc:
            status[name] = f"{type(exc).__name__}: {exc}"
    return status


def default_frameworks() -> list[str]:
    return ["torch"] if importlib.util.find_spec("torch") is not None else []


def ldconfig_libraries() -> list[str]:
    """Paths the dynamic linker cache knows (`ldconfig -p`), for libraries outside the usual folders."""
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split("=>")[-1].strip() for line in out.splitlines() if "=>" in line]


def disk_copies() -> dict[str, list[str]]:
    """family -> real paths of every copy found in site-packages, the system toolkit and the linker cache."""
    roots = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)]
    patterns = [f"{r}/nvidia/*/lib/lib*.so*" for r in roots] + [f"{r}/torch/lib/lib*.so*" for r in roots]
    patterns += ["/usr/local/cuda*/lib64/lib*.so*", "/usr/local/cuda*/lib/lib*.so*",
                 "/usr/local/cuda*/targets/*/lib/lib*.so*", "/usr/lib/x86_64-linux-gnu/lib*.so*",
                 "/usr/local/nvidia/lib64/lib*.so*"]
    paths = [p for pattern in patterns for p in glob.glob(pattern)] + ldconfig_libraries()
    copies: dict[str, set[str]] = {}
    for path in paths:
        family = family_of(Path(path).name)
        if family and os.path.isfile(path):
            copies.setdefault(family, set()).add(os.path.realpath(path))
    return {family: sorted(found) for family, found in copies.items()}
