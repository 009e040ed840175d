"""Cubin (CUDA ELF) reader: SM architecture, kernels and their per-kernel resources.

Facts used (cuda-facts.md §4): e_machine EM_CUDA = 190; e_flags carry the SM in the low byte for
ABI version 7 (ELFOSABI 0x33) and in bits 8-15 for ABI version 8 (ELFOSABI 0x41, nvcc 13);
`__global__` entry points have st_other & STO_CUDA_ENTRY; per-kernel attributes are EIATTR records
in `.nv.info` (keyed by symbol index) and `.nv.info.<kernel>`; static shared memory is the size of
`.nv.shared.<kernel>`. Verified against cuobjdump on nvcc 13.0 and ptxas 12.9 output (see tests).
"""

from __future__ import annotations

import io
import re
import struct
from dataclasses import dataclass, field
from typing import Iterator

from opgate.inspect.demangle import demangle_all
from opgate.inspect.model import KernelResources

EM_CUDA = 190
ELF_MAGIC = b"\x7fELF"
STO_CUDA_ENTRY = 0x10
STT_FUNC = 2
SYMBOL = struct.Struct("<IBBHQQ")  # Elf64_Sym: name, info, other, shndx, value, size

# ABI version 7 (CUDA <= 12.x toolchains) e_flags: SM in bits 0-7, 0x800 = arch-specific (`a`) target.
ABI_V1 = 7
EF_CUDA_V1_ACCELERATORS = 0x800
# ABI version 8 (CUDA 13 toolchains, and 12.8+ for sm_100+): SM in bits 8-15. The `a` marker is not in
# e_flags there (sm_90 and sm_90a cubins from nvcc 13.0 have equal e_flags); it is attribute 0x09 of
# the `.nv.compat` section: 1 for sm_90a/sm_100a/sm_120a..., 0 otherwise (observed on nvcc 13.0).
COMPAT_ATTR_ARCH_SPECIFIC = 0x09

# EIATTR codes (cuda-facts.md §4d) and record formats (§4c).
EIATTR_MAX_THREADS = 0x05
EIATTR_REQNTID = 0x10
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_CBANK_PARAM_SIZE = 0x19
EIATTR_MAX_STACK_SIZE = 0x23
EIATTR_REGCOUNT = 0x2F
EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 0x01, 0x02, 0x03, 0x04

# `ptxas -arch sm_100f` as recorded in the .note.nv.tkinfo note: the only place the `f` suffix of a
# standalone cubin survives (cuobjdump prints such cubins as plain sm_100).
_TKINFO_ARCH = re.compile(rb"-arch[= ]sm_(\d+)([af]?)[ \0]")


class CubinError(Exception):
    """Not a cubin, or a cubin too damaged to read; the message is one line."""


@dataclass(frozen=True)
class _Section:
    index: int
    name: str
    nobits: bool
    offset: int
    size: int
    link: int
    info: int


@dataclass
class CubinInfo:
    sm: int
    suffix: str
    abi_version: int
    kernels: list[KernelResources] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _header(data: bytes) -> tuple[int, int]:
    """(abi_version, e_flags) of a 64-bit little-endian EM_CUDA ELF, or CubinError."""
    if len(data) < 64 or data[:4] != ELF_MAGIC:
        raise CubinError("not an ELF image (no 0x7f 'ELF' magic)")
    if data[4] != 2 or data[5] != 1:
        raise CubinError("not a 64-bit little-endian ELF, so not a cubin")
    e_machine = struct.unpack_from("<H", data, 18)[0]
    if e_machine != EM_CUDA:
        raise CubinError(f"ELF machine is {e_machine}, not EM_CUDA (190)")
    return data[8], struct.unpack_from("<I", data, 48)[0]


def sm_from_flags(abi_version: int, e_flags: int) -> int:
    """LLVM's ELFObjectFileBase::getNVPTXCPUName rule: ABI 7 -> low byte, otherwise bits 8-15."""
    return e_flags & 0xFF if abi_version == ABI_V1 else (e_flags >> 8) & 0xFF


def cubin_arch(data: bytes) -> tuple[int, str]:
    """(sm, suffix) of a cubin, e.g. (90, "a"). Raises CubinError."""
    abi_version, e_flags = _header(data)
    sm = sm_from_flags(abi_version, e_flags)
    if sm == 0:
        raise CubinError(f"e_flags {e_flags:#x} (ABI version {abi_version}) carry no SM architecture")
    if abi_version == ABI_V1:
        return sm, "a" if e_flags & EF_CUDA_V1_ACCELERATORS else ""
    return sm, _suffix_from_sections(data, _sections(data), sm)


def _suffix_from_sections(data: bytes, sections: dict[str, _Section], sm: int) -> str:
    compat = sections.get(".nv.compat")
    if compat is not None:
        for attr, value in _records(_section_bytes(data, compat)):
            if attr == COMPAT_ATTR_ARCH_SPECIFIC and isinstance(value, int) and value & 0xFF == 1:
                return "a"
    note = sections.get(".note.nv.tkinfo")
    if note is not None:
        match = _TKINFO_ARCH.search(_section_bytes(data, note))
        if match and int(match.group(1)) == sm:
            return match.group(2).decode()
    return ""


def _sections(data: bytes) -> dict[str, _Section]:
    """Section headers by name (headers only, via pyelftools); CubinError when unreadable."""
    from elftools.elf.elffile import ELFFile

    try:
        elf = ELFFile(io.BytesIO(data))
        found: dict[str, _Section] = {}
        for index, section in enumerate(elf.iter_sections()):
            if index == 0:
                continue
            found.setdefault(section.name, _Section(
                index, section.name, section["sh_type"] == "SHT_NOBITS",
                int(section["sh_offset"]), int(section["sh_size"]), int(section["sh_link"]),
                int(section["sh_info"])))
        return found
    except Exception as exc:  # pyelftools raises a zoo of types (ELFError, construct, struct, Unicode...)
        raise CubinError(f"section headers unreadable: {type(exc).__name__}: {exc}") from None


def _section_bytes(data: bytes, section: _Section) -> bytes:
    if section.nobits:
        return b""
    chunk = data[section.offset:section.offset + section.size]
    if len(chunk) != section.size:
        raise CubinError(f"section {section.name} runs past the end of the cubin")
    return chunk


def _records(blob: bytes) -> Iterator[tuple[int, int | bytes]]:
    """EIATTR records of an `.nv.info*` / `.nv.compat` section: (attribute, u16 value or SVAL bytes).

    Stops at the first record that does not fit or has an unknown format.
    """
    offset = 0
    while offset + 4 <= len(blob):
        fmt, attr, value = blob[offset], blob[offset + 1], struct.unpack_from("<H", blob, offset + 2)[0]
        if fmt == EIFMT_SVAL:
            payload = blob[offset + 4:offset + 4 + value]
            if len(payload) != value:
                raise CubinError(f"attribute {attr:#x} at {offset} claims {value} bytes past the section end")
            yield attr, payload
            offset += 4 + value
        elif fmt in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):
            yield attr, value if fmt != EIFMT_BVAL else value & 0xFF
            offset += 4
        else:
            raise CubinError(f"attribute record at {offset} has unknown format {fmt:#x}")


def _u32s(payload: bytes) -> tuple[int, ...]:
    return struct.unpack_from(f"<{len(payload) // 4}I", payload) if len(payload) >= 4 else ()


def read_cubin(data: bytes, demangle: bool = True) -> CubinInfo:
    """Architecture and kernels of a cubin. Raises CubinError when the cubin cannot be read at all;
    problems with single kernels or attributes become `errors` lines."""
    abi_version, e_flags = _header(data)
    sm = sm_from_flags(abi_version, e_flags)
    if sm == 0:
        raise CubinError(f"e_flags {e_flags:#x} (ABI version {abi_version}) carry no SM architecture")
    sections = _sections(data)
    if abi_version == ABI_V1:
        suffix = "a" if e_flags & EF_CUDA_V1_ACCELERATORS else ""
    else:
        try:
            suffix = _suffix_from_sections(data, sections, sm)
        except CubinError:
            suffix = ""
    info = CubinInfo(sm=sm, suffix=suffix, abi_version=abi_version)
    by_index = {s.index: s for s in sections.values()}

    kernels = _kernel_symbols(data, sections, info)
    module_attrs: dict[int, dict[int, int]] = {}  # symbol index -> attribute -> value
    if ".nv.info" in sections:
        try:
            for attr, value in _records(_section_bytes(data, sections[".nv.info"])):
                if isinstance(value, bytes) and len(value) >= 8:
                    symbol, amount = struct.unpack_from("<II", value)
                    module_attrs.setdefault(symbol, {})[attr] = amount
        except CubinError as exc:
            info.errors.append(f".nv.info: {exc}")

    names = [name for name, _, _ in kernels]
    pretty = demangle_all(names) if demangle else {}
    for name, symbol_index, text_index in kernels:
        attrs = module_attrs.get(symbol_index, {})
        per_kernel: dict[int, int | bytes] = {}
        section = sections.get(f".nv.info.{name}")
        if section is not None:
            try:
                per_kernel = dict(_records(_section_bytes(data, section)))
            except CubinError as exc:
                info.errors.append(f".nv.info.{name}: {exc}")
        registers = attrs.get(EIATTR_REGCOUNT)
        text = by_index.get(text_index)
        if registers is None and text is not None:
            registers = (text.info >> 24) & 0xFF or None  # SHI_REGISTERS fallback (pre-sm_90 layouts)
        shared = sections.get(f".nv.shared.{name}")
        local = sections.get(f".nv.local.{name}")
        info.kernels.append(KernelResources(
            name=name,
            demangled=pretty.get(name, name),
            sm=sm,
            suffix=suffix,
            registers=registers,
            static_shared_bytes=shared.size if shared is not None else 0,
            local_bytes=local.size if local is not None else 0,
            stack_frame_bytes=attrs.get(EIATTR_FRAME_SIZE),
            max_stack_bytes=attrs.get(EIATTR_MAX_STACK_SIZE, attrs.get(EIATTR_MIN_STACK_SIZE)),
            max_threads=_threads(per_kernel.get(EIATTR_MAX_THREADS)) or _threads(per_kernel.get(EIATTR_REQNTID)),
            param_bytes=_int_or_none(per_kernel.get(EIATTR_CBANK_PARAM_SIZE)),
        ))
    return info


def _threads(value: int | bytes | None) -> int | None:
    if not isinstance(value, bytes):
        return None
    dims = _u32s(value)[:3]
    if len(dims) != 3 or 0 in dims:
        return None
    return dims[0] * dims[1] * dims[2]


def _int_or_none(value: int | bytes | None) -> int | None:
    return value if isinstance(value, int) else None


def _kernel_symbols(data: bytes, sections: dict[str, _Section], info: CubinInfo) -> list[tuple[str, int, int]]:
    """(name, symbol index, section index) of every `__global__` entry point, in symbol-table order."""
    symtab = sections.get(".symtab")
    if symtab is None:
        info.errors.append("cubin has no .symtab: kernel list unknown")
        return []
    by_index = {s.index: s for s in sections.values()}
    try:
        strtab = by_index.get(symtab.link)
        strings = _section_bytes(data, strtab) if strtab is not None else b""
        table = _section_bytes(data, symtab)
    except CubinError as exc:
        info.errors.append(str(exc))
        return []
    kernels = []
    for index in range(len(table) // SYMBOL.size):
        name_off, st_info, st_other, shndx, _value, _size = SYMBOL.unpack_from(table, index * SYMBOL.size)
        if st_info & 0xF != STT_FUNC or not st_other & STO_CUDA_ENTRY:
            continue
        end = strings.find(b"\0", name_off)
        if name_off >= len(strings) or end < 0:
            info.errors.append(f"symbol {index}: name offset {name_off} is outside .strtab")
            continue
        name = strings[name_off:end].decode("utf-8", "replace")
        kernels.append((name, index, shndx))
    return kernels


def read_cubin_kernels(data: bytes) -> list[KernelResources]:
    """The kernels of a cubin with their resources (the analyze verb uses this on Triton cubins).

    Raises CubinError when the bytes are not a readable cubin.
    """
    return read_cubin(data).kernels
