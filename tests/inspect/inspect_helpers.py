"""Helpers for the `opgate inspect` tests: fixture paths and the NVIDIA tools when present.

(A module with a unique name rather than conftest, so it never clashes with tests/conftest.py.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "data" / "inspect"
GOLDEN = FIXTURES / "golden"
SCRIPTS = REPO / "scripts"

# Every binary fixture with cuobjdump goldens (scripts/build_inspect_fixtures.sh builds them).
BINARY_FIXTURES = sorted(
    p.relative_to(FIXTURES).as_posix()
    for p in FIXTURES.rglob("*")
    if p.is_file() and (p.suffix in {".o", ".so", ".a", ".cubin", ".fatbin"} or p.name == "rdc_app")
)


def golden(name: str, kind: str) -> str:
    """Recorded cuobjdump output for a fixture: kind is list-elf, list-ptx or res-usage."""
    return (GOLDEN / f"{Path(name).name}.{kind}.txt").read_text()


def find_cuobjdump() -> str | None:
    from opgate.inspect.listing import find_cuobjdump as find

    return find()


def find_nvcc() -> str | None:
    return shutil.which("nvcc") or (str(Path("/usr/local/cuda/bin/nvcc"))
                                     if Path("/usr/local/cuda/bin/nvcc").exists() else None)
