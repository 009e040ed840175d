"""cuobjdump-compatible listing lines (`--list-elf` / `--list-ptx`), for side-by-side comparison.

cuobjdump names each image `<file stem>.<n>.sm_<arch>.<cubin|ptx>`, numbering ELF and PTX images
separately across all containers, prints the `a` suffix but not `f`, and by default lists only the
executable fatbin when a file has one (else the relocatable one). A standalone cubin is listed as
`<stem>.sm_<arch>.cubin`.
"""

from __future__ import annotations

import os

from opgate.inspect.model import KIND_PTX, KIND_SASS, BinaryReport, FatbinEntry


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _arch(entry: FatbinEntry) -> str:
    return f"sm_{entry.sm}{'a' if entry.suffix == 'a' else ''}"


def cuobjdump_lines(report: BinaryReport, kind: str) -> list[str]:
    """The lines `cuobjdump --list-elf` (kind="sass") or `--list-ptx` (kind="ptx") prints for this file."""
    label, extension = ("ELF", "cubin") if kind == KIND_SASS else ("PTX", "ptx")
    stem = _stem(report.path)
    if report.file_format in ("cubin", "triton-cubin"):
        if kind != KIND_SASS:
            return []
        return [f"ELF file {1:4d}: {stem}.{_arch(e)}.cubin" for e in report.entries]
    if report.file_format == "ptx":
        return []  # cuobjdump does not read PTX text files
    executable = [e for e in report.entries if e.section in ("", ".nv_fatbin")]
    chosen = executable if executable else list(report.entries)
    lines = []
    for number, entry in enumerate((e for e in chosen if e.kind == kind), start=1):
        lines.append(f"{label} file {number:4d}: {stem}.{number}.{_arch(entry)}.{extension}")
    return lines


__all__ = ["cuobjdump_lines", "KIND_PTX", "KIND_SASS"]
