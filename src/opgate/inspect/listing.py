"""cuobjdump-compatible listing lines (`--list-elf` / `--list-ptx`), for side-by-side comparison.

cuobjdump names each image `<file stem>.<n>.sm_<arch>.<cubin|ptx>`, numbering ELF and PTX images
separately across all containers, prints the `a` suffix but not `f`, and by default lists only the
executable fatbin when a file has one (else the relocatable one). A standalone cubin is listed as
`<stem>.sm_<arch>.cubin`.
"""

from __future__ import annotations

import os
import re

from opgate.inspect.model import KIND_PTX, KIND_SASS, BinaryReport, FatbinEntry

_FUNCTION = re.compile(r"^\s*Function (\S+):\s*$")
_USAGE = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")

# (registers, stack bytes, static shared bytes, local bytes), as cuobjdump --dump-resource-usage prints
Usage = tuple[int, int, int, int]


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


def parse_listing(stdout: str) -> dict[str, list[str]]:
    """cuobjdump `--list-elf`/`--list-ptx` output, split by `member ARCHIVE:NAME:` headers ("" otherwise)."""
    members: dict[str, list[str]] = {}
    current = ""
    for line in stdout.splitlines():
        if line.startswith("member "):
            current = line[len("member "):].rstrip(":").rsplit(":", 1)[-1]
            members.setdefault(current, [])
            continue
        if line.strip():
            members.setdefault(current, []).append(line.rstrip())
    return {member: lines for member, lines in members.items() if lines}


def listing_of(reports: list[BinaryReport], kind: str) -> dict[str, list[str]]:
    """opgate's reports in parse_listing's shape (archive members keyed by member name)."""
    out = {report.member or "": cuobjdump_lines(report, kind) for report in reports}
    return {member: lines for member, lines in out.items() if lines}


def parse_resource_usage(stdout: str) -> list[dict[str, Usage]]:
    """cuobjdump `--dump-resource-usage`: per cubin in listing order, function -> usage."""
    cubins: list[dict[str, Usage]] = []
    function = None
    for line in stdout.splitlines():
        if line.startswith("Resource usage:"):
            cubins.append({})
            continue
        match = _FUNCTION.match(line)
        if match:
            function = match.group(1)
            continue
        usage = _USAGE.search(line)
        if usage and function is not None and cubins:
            reg, stack, shared, local = (int(x) for x in usage.groups())
            cubins[-1][function] = (reg, stack, shared, local)
            function = None
    return cubins


def resource_usage_of(report: BinaryReport) -> list[dict[str, Usage]]:
    """opgate's kernels (read with kernels=True) in parse_resource_usage's shape: one dict per loaded cubin.

    cuobjdump's STACK is EIATTR_MAX_STACK_SIZE (the frame when only that is recorded).
    """
    by_entry: dict[int, dict[str, Usage]] = {}
    for kernel in report.kernels:
        stack = kernel.max_stack_bytes if kernel.max_stack_bytes is not None else (kernel.stack_frame_bytes or 0)
        by_entry.setdefault(kernel.entry or 0, {})[kernel.name] = (
            kernel.registers or 0, stack, kernel.static_shared_bytes, kernel.local_bytes)
    loaded = set(map(id, report.loaded_entries()))
    return [by_entry.get(i, {}) for i, e in enumerate(report.entries) if e.kind == KIND_SASS and id(e) in loaded]


__all__ = ["cuobjdump_lines", "parse_listing", "listing_of", "parse_resource_usage", "resource_usage_of",
           "KIND_PTX", "KIND_SASS"]


def find_cuobjdump(explicit: str | None = None) -> str | None:
    """cuobjdump to compare against: an explicit path, PATH, then the nvidia-cuda-cuobjdump wheel beside this Python."""
    import shutil
    import sys
    from pathlib import Path

    if explicit:
        return explicit
    found = shutil.which("cuobjdump")
    if found:
        return found
    for candidate in sorted(Path(sys.prefix).glob("lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump")):
        return str(candidate)
    return None
