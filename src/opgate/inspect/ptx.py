"""PTX text: the ISA version (`.version`), the target architecture (`.target`) and the entry points."""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION = re.compile(r"^\s*\.version\s+(\d+)\.(\d+)\b", re.MULTILINE)
_TARGET = re.compile(r"^\s*\.target\s+([^\n/]*)", re.MULTILINE)
_ARCH = re.compile(r"\bsm_(\d+)([af]?)\b")
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%.][\w$%.]*)")


@dataclass(frozen=True)
class PtxInfo:
    isa: str | None  # "9.0"
    sm: int | None  # virtual architecture number (90 for `.target sm_90a`)
    suffix: str  # "", "a" or "f"
    target: str  # the `.target` line as written, e.g. "sm_90a" or "sm_80, debug"
    entries: tuple[str, ...]


def parse_ptx(text: str) -> PtxInfo:
    """Read `.version`/`.target`/`.entry` from PTX source; fields missing from the text are None/""."""
    version = _VERSION.search(text)
    target = _TARGET.search(text)
    target_text = target.group(1).strip() if target else ""
    arch = _ARCH.search(target_text)
    return PtxInfo(
        isa=f"{version.group(1)}.{version.group(2)}" if version else None,
        sm=int(arch.group(1)) if arch else None,
        suffix=arch.group(2) if arch else "",
        target=target_text,
        entries=tuple(dict.fromkeys(_ENTRY.findall(text))),
    )


def looks_like_ptx(head: bytes) -> bool:
    """A cheap sniff on the first kilobytes of a file: PTX declares `.version` before anything else."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        return False
    return _VERSION.search(text) is not None
