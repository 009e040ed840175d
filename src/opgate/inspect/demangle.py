"""C++ symbol demangling through `c++filt` (one batch per call), falling back to the mangled names.

A subprocess keeps a demangler crash on a hostile name out of opgate's process.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Iterable

_MAX_NAME = 4096


# nvcc renames kernels of internal linkage (static, anonymous namespace) to
# `__nv_static_<n>_<translation unit id>_` + the Itanium name, e.g. `__nv_static_51_tmpxft_..._ii_1a2b__Z4stepPf`.
_NV_STATIC_PREFIX = "__nv_static_"


def itanium_part(name: str) -> str | None:
    """The Itanium-mangled name (`_Z...`) inside `name`: itself, or after nvcc's `__nv_static_` prefix."""
    if name.startswith("_Z"):
        return name
    if name.startswith(_NV_STATIC_PREFIX):
        at = name.find("__Z", len(_NV_STATIC_PREFIX))
        if at >= 0:
            return name[at + 1:]
    return None


def demangle_all(names: Iterable[str], timeout_s: float = 10.0) -> dict[str, str]:
    """Map each Itanium-mangled name (`_Z...`, also behind nvcc's `__nv_static_` prefix) to its demangled
    form (`... [file-static]` for the prefixed ones); others map to themselves."""
    names = list(names)
    result = {n: n for n in names}
    inner = {n: itanium_part(n) for n in names}
    wanted = sorted({m for m in inner.values() if m and len(m) <= _MAX_NAME and m.isprintable() and "\n" not in m})
    tool = shutil.which("c++filt")
    if not wanted or tool is None:
        return result
    try:
        proc = subprocess.run([tool], input="\n".join(wanted) + "\n", capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return result
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) != len(wanted):
        return result
    demangled = dict(zip(wanted, lines))
    for name, mangled in inner.items():
        if mangled in demangled:
            result[name] = demangled[mangled] + (" [file-static]" if mangled != name else "")
    return result
