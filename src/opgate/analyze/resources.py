"""Registers, shared and local memory of a compiled kernel, read back from its cubin.

Sources, best first:
1. `opgate.inspect.cubin.read_cubin_kernels` (opgate's own ELF reader, shared with `opgate inspect`);
2. `cuobjdump -res-usage` (NVIDIA's tool; Triton ships one, found through `triton.knobs.nvidia.cuobjdump`);
3. nothing: the caller falls back to what Triton's metadata knows without a GPU (dynamic shared memory
   only: Triton learns the register count from the driver when it loads the kernel).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

CUOBJDUMP_TIMEOUT_S = 60


@dataclass(frozen=True)
class CubinResources:
    name: str
    registers: int
    static_shared_bytes: int  # the cubin's .nv.shared.<kernel> size: from sm_90 on it includes the reserved 1 KB
    local_bytes: int  # per thread: stack frame (register spills, local arrays) + local memory
    source: str  # which reader produced it


def _from_inspect(cubin: bytes, kernel_name: str) -> CubinResources | None:
    try:
        from opgate.inspect.cubin import read_cubin_kernels  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        kernels = read_cubin_kernels(cubin)
    except Exception:  # a cubin layout the reader does not know yet: NVIDIA's tool still reads it
        return None
    for kernel in kernels:
        if kernel.name == kernel_name:
            local = int(getattr(kernel, "local_bytes", 0) or 0) + int(getattr(kernel, "stack_bytes", 0) or 0)
            return CubinResources(
                name=kernel.name,
                registers=int(kernel.registers),
                static_shared_bytes=int(getattr(kernel, "static_shared_bytes", 0) or 0),
                local_bytes=local,
                source="opgate.inspect.cubin",
            )
    return None


def find_cuobjdump() -> str | None:
    """Triton's bundled cuobjdump, else one on PATH."""
    try:
        import triton  # noqa: F401  (heavy only the first time)
        from triton import knobs

        path = knobs.nvidia.cuobjdump.path
        if path and Path(path).is_file():
            return str(path)
    except Exception:  # no Triton, or a Triton without the knob: try PATH
        pass
    return shutil.which("cuobjdump")


_FUNCTION = re.compile(r"^\s*Function\s+(?P<name>\S+?):\s*$")
_FIELD = re.compile(r"(?P<key>[A-Z]+(?:\[\d+\])?):(?P<value>\d+)")


def parse_res_usage(text: str) -> dict[str, dict[str, int]]:
    """`cuobjdump -res-usage` output -> {kernel name: {"REG": .., "STACK": .., "SHARED": .., "LOCAL": ..}}."""
    kernels: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        match = _FUNCTION.match(line)
        if match:
            current = match.group("name")
            kernels[current] = {}
            continue
        if current is not None and "REG:" in line:
            kernels[current].update({m.group("key"): int(m.group("value")) for m in _FIELD.finditer(line)})
            current = None
    return kernels


def _from_cuobjdump(cubin: bytes, kernel_name: str) -> CubinResources | None:
    tool = find_cuobjdump()
    if tool is None:
        return None
    with tempfile.TemporaryDirectory(prefix="opgate-cubin-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        completed = subprocess.run([tool, "-res-usage", str(path)], capture_output=True, text=True,
                                   timeout=CUOBJDUMP_TIMEOUT_S)
    if completed.returncode != 0:
        return None
    usage = parse_res_usage(completed.stdout).get(kernel_name)
    if usage is None or "REG" not in usage:
        return None
    return CubinResources(
        name=kernel_name,
        registers=usage["REG"],
        static_shared_bytes=usage.get("SHARED", 0),
        local_bytes=usage.get("STACK", 0) + usage.get("LOCAL", 0),
        source="cuobjdump -res-usage",
    )


def read_kernel_resources(cubin: bytes, kernel_name: str) -> CubinResources | None:
    """The resources of `kernel_name` in `cubin`, or None when no reader is available here."""
    return _from_inspect(cubin, kernel_name) or _from_cuobjdump(cubin, kernel_name)
