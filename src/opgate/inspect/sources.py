"""Inputs of `opgate inspect`: find the device code in files, wheels, archives and directories.

Host ELF files are memory-mapped and only their headers are touched: pyelftools reads the section
table through a window over the map, and the fatbin parser reads entry headers in place. Payloads are
decompressed only when kernels are asked for. Wheels are read member by member from the zip, never
unpacked to disk. A path that cannot be opened is an InputError; a file that opens but is damaged
becomes a report with `fatal` or `errors` set, so the other inputs are still reported.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import struct
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import IO, Iterator, Sequence

from opgate.model.errors import InputError
from opgate.inspect.cubin import EM_CUDA, CubinError, read_cubin
from opgate.inspect.fatbin import (
    CONTAINER_MAGIC_BYTES,
    PayloadError,
    entry_payload,
    parse_fatbin,
)
from opgate.inspect.model import (
    KIND_PTX,
    KIND_SASS,
    SECTION_EXECUTABLE,
    SECTION_RELOCATABLE,
    BinaryReport,
    FatbinEntry,
    KernelResources,
)
from opgate.inspect.ptx import looks_like_ptx, parse_ptx

ELF_MAGIC = b"\x7fELF"
ZIP_MAGIC = b"PK\x03\x04"
AR_MAGIC = b"!<arch>\n"
FATBIN_SECTIONS = (SECTION_EXECUTABLE, SECTION_RELOCATABLE)
ELF_TYPES = {"ET_REL": "elf-relocatable", "ET_EXEC": "elf-executable", "ET_DYN": "elf-shared"}
# A wheel member is read into memory to be parsed; refuse absurd sizes instead of exhausting memory.
MAX_MEMBER_BYTES = 8 * 1024**3
_SNIFF = 4096


class _Window:
    """A read-only file-like view of buf[start:end] (no copy of the window), for pyelftools."""

    def __init__(self, buf, start: int, end: int) -> None:
        self._buf, self._start, self._end, self._pos = buf, start, end, 0

    def read(self, size: int = -1) -> bytes:
        begin = self._start + self._pos
        stop = self._end if size is None or size < 0 else min(self._end, begin + size)
        if begin >= stop:
            return b""
        self._pos = stop - self._start
        return bytes(self._buf[begin:stop])

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._end - self._start}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def tell(self) -> int:
        return self._pos


# -- entry points ----------------------------------------------------------------------------------

def inspect_paths(paths: Sequence[Path], kernels: bool = False, deep: bool = False) -> list[BinaryReport]:
    """Reports for every input. Raises InputError naming the first path that cannot be opened.

    `deep` also searches host ELFs' data sections for fatbin containers a library embeds and loads
    itself (cuFFT 12 keeps thousands there; cuobjdump does not list them)."""
    for path in paths:
        _check_readable(Path(path))
    reports: list[BinaryReport] = []
    for path in paths:
        path = Path(path)
        if path.is_dir():
            reports.extend(inspect_directory(path, kernels, deep))
        else:
            reports.extend(inspect_file(path, kernels, explicit=True, deep=deep))
    return reports


def _check_readable(path: Path) -> None:
    if not path.exists():
        from opgate.model.errors import why_missing

        reason = why_missing(path)
        raise InputError(f"{path}: no such file or directory; check the path" if reason == "does not exist"
                         else f"{path} {reason}; fix the link or pass the file itself")
    if path.is_dir():
        if not os.access(path, os.R_OK | os.X_OK):
            raise InputError(f"{path}: directory is not readable (permission denied); fix its permissions")
        return
    if not path.is_file():
        raise InputError(f"{path}: not a regular file or directory; pass a binary, wheel or folder")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise InputError(f"{path}: cannot be opened ({exc.strerror or exc}); check its permissions") from None


def inspect_directory(root: Path, kernels: bool = False, deep: bool = False) -> list[BinaryReport]:
    """Every file under `root` that carries device code (Triton cache entries included), in path order.

    Files without device code are skipped silently: a directory of a Python environment holds
    thousands of plain ELF files.
    """
    reports: list[BinaryReport] = []
    seen: set[str] = set()
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        names = set(files)
        for name in sorted(files):
            path = Path(folder) / name
            if path.is_symlink() or not path.is_file():
                continue
            real = os.path.realpath(path)
            if real in seen:
                continue
            seen.add(real)
            if name.endswith(".ptx") and _is_triton_artifact(Path(folder), name[:-4], names):
                continue  # Triton keeps the PTX it compiled from, but loads only the cubin
            try:
                found = inspect_file(path, kernels, explicit=False, deep=deep)
            except InputError:
                continue
            reports.extend(r for r in found if r.entries or r.fatal or r.errors)
    return reports


def _is_triton_artifact(folder: Path, stem: str, names: set[str]) -> bool:
    return f"{stem}.cubin" in names and f"{stem}.json" in names


def inspect_file(path: Path, kernels: bool = False, explicit: bool = True, deep: bool = False) -> list[BinaryReport]:
    """Reports for one file (a wheel or archive gives one per member that carries device code)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(_SNIFF)
            size = os.fstat(handle.fileno()).st_size
            if not head:
                if explicit:
                    raise InputError(f"{path}: the file is empty; pass a binary that carries CUDA device code")
                return []
            if head.startswith(ZIP_MAGIC):
                if explicit or path.suffix == ".whl":
                    return inspect_wheel(path, kernels)
                return []
            kind = _sniff(head, path.name)
            if kind is None:
                if explicit:
                    raise InputError(f"{path}: not an ELF binary, cubin, fatbin, PTX file, wheel or archive; "
                                     "pass one of those or a directory")
                return []
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                if kind == "ar":
                    return inspect_archive(mapped, str(path), kernels, size)
                report = inspect_buffer(mapped, 0, size, str(path), None, kind, kernels, deep)
                report = _with_triton_metadata(path, report)
                return [report]
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc}); check the file") from None


def _sniff(head: bytes, name: str) -> str | None:
    if head.startswith(ELF_MAGIC):
        return "elf"
    if head.startswith(CONTAINER_MAGIC_BYTES):
        return "fatbin"
    if head.startswith(AR_MAGIC):
        return "ar"
    if name.endswith(".ptx") or looks_like_ptx(head):
        return "ptx"
    return None


def inspect_buffer(buf, start: int, end: int, path: str, member: str | None, kind: str,
                   kernels: bool = False, deep: bool = False) -> BinaryReport:
    """Report for buf[start:end] of sniffed `kind` ("elf", "fatbin", "ptx"). Never raises on content."""
    size = end - start
    if kind == "fatbin":
        parsed = parse_fatbin(buf, start, end)
        report = BinaryReport(path=path, member=member, file_format="fatbin", size=size,
                              entries=tuple(parsed.entries), errors=tuple(parsed.errors))
        return _add_kernels(report, buf) if kernels else report
    if kind == "ptx":
        return _ptx_report(bytes(buf[start:end]), path, member)
    return _elf_report(buf, start, end, path, member, kernels, deep)


# -- ELF -------------------------------------------------------------------------------------------

# Below this size a host ELF is first searched for the fatbin section names (a fast C-level find),
# so the thousands of plain libraries in a directory or static archive skip section-table parsing.
# Larger files go straight to the section table: a whole-file search would touch every page.
_QUICK_REJECT_MAX = 64 * 1024 * 1024
_ELF_TYPE_CODES = {1: "elf-relocatable", 2: "elf-executable", 3: "elf-shared"}


def _plainly_host_only(buf, start: int, end: int) -> str | None:
    """The file format when buf[start:end] is a small non-CUDA ELF that names no fatbin section, else None."""
    if end - start > _QUICK_REJECT_MAX or end - start < 64:
        return None
    header = bytes(buf[start:start + 64])
    if header[5] != 1 or struct.unpack_from("<H", header, 18)[0] == EM_CUDA:
        return None  # big-endian or a cubin: let the full reader decide
    if header[4] == 2:
        shoff, = struct.unpack_from("<Q", header, 40)
        entsize, count = struct.unpack_from("<HH", header, 58)
    else:
        shoff, = struct.unpack_from("<I", header, 32)
        entsize, count = struct.unpack_from("<HH", header, 46)
    if shoff + entsize * count > end - start:
        return None  # section table missing (truncated file): the full reader reports it
    if any(buf.find(name.encode(), start, end) >= 0 for name in FATBIN_SECTIONS):
        return None
    return _ELF_TYPE_CODES.get(struct.unpack_from("<H", header, 16)[0], "elf")


def _elf_report(buf, start: int, end: int, path: str, member: str | None, kernels: bool,
                deep: bool = False) -> BinaryReport:
    from elftools.elf.elffile import ELFFile

    size = end - start
    host_only = None if deep else _plainly_host_only(buf, start, end)
    if host_only is not None:
        return BinaryReport(path=path, member=member, file_format=host_only, size=size)
    try:
        elf = ELFFile(_Window(buf, start, end))
        machine = elf.header["e_machine"]
        file_format = ELF_TYPES.get(elf.header["e_type"], "elf")
        if machine == "EM_CUDA" or machine == EM_CUDA:
            return _cubin_report(bytes(buf[start:end]), path, member, kernels)
        sections = []
        data_sections = []
        for section in elf.iter_sections():
            if section.name in FATBIN_SECTIONS:
                sections.append((section.name, section["sh_type"], int(section["sh_offset"]),
                                 int(section["sh_size"])))
            elif deep and section.name in EMBEDDING_SECTIONS and section["sh_type"] != "SHT_NOBITS":
                data_sections.append((section.name, int(section["sh_offset"]), int(section["sh_size"])))
    except Exception as exc:  # pyelftools raises many types on damaged headers; all mean "unreadable ELF"
        problem = f"ELF headers unreadable ({type(exc).__name__}: {exc})"
        return _scan_for_containers(buf, start, end, path, member, kernels, problem)
    entries: list[FatbinEntry] = []
    errors: list[str] = []
    container_base = 0
    for name, sh_type, offset, length in sections:
        if sh_type == "SHT_NOBITS":
            errors.append(f"{name}: section has no file contents (SHT_NOBITS)")
            continue
        if offset + length > size:
            errors.append(f"{name}: section at {offset:#x} of {length} bytes runs past the end of the file "
                          f"({size} bytes); reading what is there")
        parsed = parse_fatbin(buf, start + offset, min(start + offset + length, end), section=name)
        entries.extend(replace(e, offset=e.offset - start, container=e.container + container_base)
                       for e in parsed.entries)
        container_base += parsed.containers
        errors.extend(parsed.errors)
    if deep:
        for name, offset, length in data_sections:
            found = embedded_entries(buf, start + offset, min(start + offset + length, end), name)
            entries.extend(replace(e, offset=e.offset - start, container=e.container + container_base)
                           for e in found.entries)
            container_base += found.containers
    metadata: dict = {}
    if entries:
        runtime = cuda_runtime_of(elf, buf, start, end)
        if runtime:
            metadata["cuda_runtime"] = runtime
    report = BinaryReport(path=path, member=member, file_format=file_format, size=size,
                          entries=tuple(entries), errors=tuple(errors), metadata=metadata)
    return _add_kernels(report, buf, start) if kernels else report


_TOOLKIT_RELEASE = re.compile(rb"Cuda compilation tools, release (\d+)\.(\d+)")
_CUDART_SONAME = re.compile(r"^libcudart\.so\.(\d+)")
# cudaGetErrorString(cudaErrorInsufficientDriver): present in every binary that links the runtime statically.
_STATIC_CUDART_MARKER = b"CUDA driver version is insufficient for CUDA runtime version"


def cuda_runtime_of(elf, buf, start: int, end: int) -> dict | None:
    """Which CUDA runtime a host binary with device code brings: {"major", "linkage", "evidence", "toolkit"}.

    Dynamic: DT_NEEDED libcudart.so.N (any N.x runtime of that major may be loaded). Static: the runtime's
    own error strings are in the file, and its major is the toolkit's (nvcc's `.note.nv.tkinfo` release
    string in the embedded cubins, when they are not compressed). None when neither is found (e.g. code
    loaded through the driver API only, as Triton does)."""
    found = _TOOLKIT_RELEASE.search(buf, start, end)
    toolkit = f"{int(found.group(1))}.{int(found.group(2))}" if found else None
    try:
        dynamic = elf.get_section_by_name(".dynamic")
        needed = [tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"] if dynamic else []
    except Exception:  # a damaged dynamic section: no runtime evidence from it
        needed = []
    for name in needed:
        match = _CUDART_SONAME.match(name)
        if match:
            return {"major": int(match.group(1)), "linkage": "dynamic", "evidence": f"DT_NEEDED {name}",
                    "toolkit": toolkit}
    if toolkit and buf.find(_STATIC_CUDART_MARKER, start, end) >= 0:
        return {"major": int(toolkit.split(".")[0]), "linkage": "static",
                "evidence": f"statically linked CUDA runtime, built with CUDA {toolkit}", "toolkit": toolkit}
    return None


# Sections where libraries keep fatbins they load themselves (cuModuleLoadData on an embedded blob).
EMBEDDING_SECTIONS = (".data", ".rodata", ".ldata", ".lrodata", ".data.rel.ro")


def embedded_entries(buf, start: int, end: int, section: str):
    """Fatbin containers embedded in a data section. Only containers that parse cleanly count: the
    magic can occur by chance in data, so a container with any parse error is ignored, not reported."""
    from opgate.inspect.fatbin import FatbinParse

    result = FatbinParse()
    offset = buf.find(CONTAINER_MAGIC_BYTES, start, end)
    while offset >= 0:
        header_size, fat_size = struct.unpack_from("<HQ", bytes(buf[offset + 6:offset + 16]).ljust(10, b"\0"))
        stop = offset + header_size + fat_size
        if header_size == 16 and stop <= end:
            parsed = parse_fatbin(buf, offset, stop, section=f"{section} (embedded)")
            if parsed.entries and not parsed.errors and not any(e.error for e in parsed.entries):
                result.entries.extend(replace(e, container=e.container + result.containers) for e in parsed.entries)
                result.containers += parsed.containers
                offset = buf.find(CONTAINER_MAGIC_BYTES, stop, end)
                continue
        offset = buf.find(CONTAINER_MAGIC_BYTES, offset + 4, end)
    return result


def _scan_for_containers(buf, start: int, end: int, path: str, member: str | None, kernels: bool,
                         problem: str) -> BinaryReport:
    """Fallback for an ELF whose section table is lost (typically a truncated file, whose section
    headers sit at its end): find fatbin containers by their magic so what survives is still reported."""
    entries: list[FatbinEntry] = []
    errors = [f"{problem}; fatbin containers located by scanning for their magic instead"]
    containers = 0
    offset = buf.find(CONTAINER_MAGIC_BYTES, start, end)
    while offset >= 0:
        header_size, fat_size = struct.unpack_from("<HQ", bytes(buf[offset + 6:offset + 16]).ljust(10, b"\0"))
        stop = min(end, offset + header_size + fat_size) if header_size >= 16 else end
        parsed = parse_fatbin(buf, offset, stop, section="(scanned)")
        entries.extend(replace(e, offset=e.offset - start, container=e.container + containers)
                       for e in parsed.entries)
        errors.extend(parsed.errors)
        containers += max(parsed.containers, 1)
        offset = buf.find(CONTAINER_MAGIC_BYTES, max(stop, offset + 4), end)
    if not entries:
        return BinaryReport(path=path, member=member, file_format="elf", size=end - start, fatal=problem)
    report = BinaryReport(path=path, member=member, file_format="elf", size=end - start, entries=tuple(entries),
                          errors=tuple(errors))
    return _add_kernels(report, buf, start) if kernels else report


def _add_kernels(report: BinaryReport, buf, start: int = 0) -> BinaryReport:
    """Decompress each loadable SASS entry and read its kernels (the only step that touches payloads)."""
    kernels: list[KernelResources] = []
    errors = list(report.errors)
    loaded = {id(e) for e in report.loaded_entries()}
    for index, entry in enumerate(report.entries):
        if entry.kind != KIND_SASS or id(entry) not in loaded:
            continue
        try:
            payload = entry_payload(buf, replace(entry, offset=entry.offset + start))
            info = read_cubin(payload)
        except (PayloadError, CubinError) as exc:
            errors.append(f"{entry.arch} entry at {entry.offset:#x}: {exc}")
            continue
        kernels.extend(replace(k, entry=index, suffix=entry.suffix or k.suffix) for k in info.kernels)
        errors.extend(f"{entry.arch} entry at {entry.offset:#x}: {e}" for e in info.errors)
    return replace(report, kernels=tuple(kernels), errors=tuple(errors))


def _cubin_report(data: bytes, path: str, member: str | None, kernels: bool) -> BinaryReport:
    try:
        info = read_cubin(data, demangle=kernels)
    except CubinError as exc:
        return BinaryReport(path=path, member=member, file_format="cubin", size=len(data), fatal=str(exc))
    entry = FatbinEntry(kind=KIND_SASS, sm=info.sm, suffix=info.suffix, compression="none",
                        payload_size=len(data), code_version=f"ABI {info.abi_version}")
    return BinaryReport(path=path, member=member, file_format="cubin", size=len(data), entries=(entry,),
                        kernels=tuple(replace(k, entry=0) for k in info.kernels) if kernels else (),
                        errors=tuple(info.errors))


def _ptx_report(data: bytes, path: str, member: str | None) -> BinaryReport:
    info = parse_ptx(data.decode("utf-8", "replace"))
    if info.isa is None or info.sm is None:
        missing = ".version" if info.isa is None else ".target sm_XY"
        return BinaryReport(path=path, member=member, file_format="ptx", size=len(data),
                            fatal=f"PTX text without a {missing} directive")
    entry = FatbinEntry(kind=KIND_PTX, sm=info.sm, suffix=info.suffix, ptx_isa=info.isa,
                        code_version=info.isa, payload_size=len(data))
    return BinaryReport(path=path, member=member, file_format="ptx", size=len(data), entries=(entry,),
                        metadata={"ptx_entries": list(info.entries)})


def _with_triton_metadata(path: Path, report: BinaryReport) -> BinaryReport:
    """A Triton cache entry is `<name>.cubin` beside `<name>.json` (its compile metadata)."""
    if report.file_format != "cubin":
        return report
    meta_path = path.with_suffix(".json")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return report
    if not isinstance(meta, dict) or "target" not in meta:
        return report
    keep = ("name", "num_warps", "num_stages", "num_ctas", "shared", "target", "triton_version", "ptx_version")
    return replace(report, file_format="triton-cubin",
                   metadata={"triton": {k: meta.get(k) for k in keep if k in meta}})


# -- wheels and archives ---------------------------------------------------------------------------

def inspect_wheel(path: Path, kernels: bool = False, source: IO[bytes] | None = None) -> list[BinaryReport]:
    """Every member of a wheel (a zip) that carries device code, read from the archive in memory.

    `source` reads the zip from an open binary stream instead of `path` (which then only labels it).
    """
    try:
        archive = zipfile.ZipFile(source if source is not None else path)
    except Exception as exc:  # zipfile raises BadZipFile, OSError, ValueError, struct.error... on damage
        return [BinaryReport(path=str(path), file_format="wheel", fatal=f"not a readable zip/wheel: {exc}")]
    reports: list[BinaryReport] = []
    scanned = 0
    with archive:
        for info in archive.infolist():
            if info.is_dir() or info.file_size == 0:
                continue
            scanned += 1
            try:
                with archive.open(info) as member:
                    head = member.read(_SNIFF)
                    kind = _sniff(head, info.filename)
                    if kind is None:
                        continue
                    if info.file_size > MAX_MEMBER_BYTES:
                        reports.append(BinaryReport(path=str(path), member=info.filename, size=info.file_size,
                                                    fatal=f"member is {info.file_size} bytes, over the "
                                                          f"{MAX_MEMBER_BYTES} byte limit"))
                        continue
                    data = head + member.read()
            except Exception as exc:  # damaged member: BadZipFile (CRC), zlib.error, EOFError, encrypted...
                reports.append(BinaryReport(path=str(path), member=info.filename,
                                            fatal=f"cannot read member: {type(exc).__name__}: {exc}"))
                continue
            if kind == "ar":
                found = inspect_archive(data, f"{path}!{info.filename}", kernels, len(data))
            else:
                found = [inspect_buffer(data, 0, len(data), str(path), info.filename, kind, kernels)]
            reports.extend(r for r in found if r.entries or r.fatal or r.errors)
    if not reports:
        size = path.stat().st_size if source is None else 0
        reports.append(BinaryReport(path=str(path), file_format="wheel", size=size,
                                    metadata={"members_scanned": scanned}))
    return reports


def _ar_members(buf, size: int) -> Iterator[tuple[str, int, int]]:
    """(name, start, end) of each member of a System V / GNU `ar` archive; malformed tails end the walk."""
    offset = len(AR_MAGIC)
    long_names = b""
    while offset + 60 <= size:
        header = bytes(buf[offset:offset + 60])
        if header[58:60] != b"`\n":
            raise ValueError(f"member header at {offset:#x} lacks the ar terminator")
        raw_name = header[:16].decode("ascii", "replace").rstrip()
        try:
            length = int(header[48:58].decode("ascii").strip() or 0)
        except ValueError:
            raise ValueError(f"member header at {offset:#x} has a non-numeric size") from None
        data_start = offset + 60
        data_end = data_start + length
        if data_end > size:
            raise ValueError(f"member at {offset:#x} claims {length} bytes past the end of the archive")
        if raw_name == "//":
            long_names = bytes(buf[data_start:data_end])
        elif raw_name.startswith("#1/"):  # BSD: the name precedes the data
            name_len = int(raw_name[3:] or 0)
            name = bytes(buf[data_start:data_start + name_len]).rstrip(b"\0").decode("utf-8", "replace")
            yield name, data_start + name_len, data_end
        elif raw_name not in ("/", "/SYM64/"):
            if raw_name.startswith("/") and raw_name[1:].isdigit():
                at = int(raw_name[1:])
                stop = long_names.find(b"/\n", at)
                name = long_names[at:stop if stop >= 0 else None].decode("utf-8", "replace")
            else:
                name = raw_name.rstrip("/")
            yield name, data_start, data_end
        offset = data_end + (data_end & 1)  # members are 2-byte aligned


def inspect_archive(buf, path: str, kernels: bool, size: int) -> list[BinaryReport]:
    """Static library (`ar`): each member object that carries device code."""
    reports: list[BinaryReport] = []
    scanned = 0
    try:
        for name, start, end in _ar_members(buf, size):
            scanned += 1
            if bytes(buf[start:start + 4]) != ELF_MAGIC:
                continue
            report = _elf_report(buf, start, end, path, name, kernels)
            if report.entries or report.fatal or report.errors:
                reports.append(report)
    except ValueError as exc:
        reports.append(BinaryReport(path=path, file_format="archive", size=size, fatal=f"archive damaged: {exc}"))
    if not reports:
        reports.append(BinaryReport(path=path, file_format="archive", size=size,
                                    metadata={"members_scanned": scanned}))
    return reports
