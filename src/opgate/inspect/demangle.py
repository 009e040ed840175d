"""C++ symbol demangling through `c++filt` (one batch per call), falling back to the mangled names.

A subprocess keeps a demangler crash on a hostile name out of opgate's process.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Iterable

_MAX_NAME = 4096


def demangle_all(names: Iterable[str], timeout_s: float = 10.0) -> dict[str, str]:
    """Map each Itanium-mangled name (`_Z...`) to its demangled form; others map to themselves."""
    wanted = sorted({n for n in names if n.startswith("_Z") and len(n) <= _MAX_NAME and n.isprintable()
                     and "\n" not in n})
    result = {n: n for n in names}
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
    result.update(zip(wanted, lines))
    return result
