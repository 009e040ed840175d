"""What `opgate inspect` reads out of a binary: plain, frozen facts (no judgement here).

A `BinaryReport` holds the device-code entries of one file (or one wheel member), the kernels of its
cubins when asked for, and every malformation found as a one-line error string.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Entry kinds, from the fatbin entry header's `kind` field (cuda-facts.md §3c).
KIND_PTX = "ptx"
KIND_SASS = "sass"

# Sections that hold fatbin containers: the one the CUDA runtime registers at load time, and the
# pre-link one that relocatable-device-code (-rdc) objects carry for nvlink.
SECTION_EXECUTABLE = ".nv_fatbin"
SECTION_RELOCATABLE = "__nv_relfatbin"


@dataclass(frozen=True)
class FatbinEntry:
    """One machine-code (SASS cubin) or PTX image.

    `sm` is compute capability x 10 (90 = sm_90); `suffix` is "" (plain), "a" (arch-specific) or
    "f" (family-specific). For PTX, `sm` is the virtual architecture and `ptx_isa` the ISA version.
    Offsets are absolute in the file (or wheel member); `section` is empty for standalone files.
    """

    kind: str
    sm: int | None
    suffix: str = ""
    ptx_isa: str | None = None
    code_version: str = ""
    compression: str = "none"  # "none" | "lz4" | "zstd" | "unknown"
    section: str = ""
    container: int = 0  # index of the fatbin container within the file
    offset: int = 0  # file offset of the entry header
    header_size: int = 0
    payload_size: int = 0  # bytes stored in the file (compressed size when compressed)
    uncompressed_size: int | None = None
    flags: int = 0
    error: str | None = None

    @property
    def arch(self) -> str:
        """`sm_90a`-style name (PTX too: cuobjdump names virtual architectures `sm_XY` as well)."""
        return f"sm_{self.sm}{self.suffix}" if self.sm is not None else "sm_?"

    @property
    def virtual_arch(self) -> str:
        return f"compute_{self.sm}{self.suffix}" if self.sm is not None else "compute_?"

    @property
    def compute_capability(self) -> tuple[int, int] | None:
        return sm_to_cc(self.sm) if self.sm is not None else None

    @property
    def usable(self) -> bool:
        return self.error is None and self.sm is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "arch": self.arch,
            "sm": self.sm,
            "suffix": self.suffix,
            "ptx_isa": self.ptx_isa,
            "code_version": self.code_version,
            "compression": self.compression,
            "section": self.section,
            "container": self.container,
            "offset": self.offset,
            "header_size": self.header_size,
            "payload_size": self.payload_size,
            "uncompressed_size": self.uncompressed_size,
            "flags": self.flags,
            "error": self.error,
        }


@dataclass(frozen=True)
class KernelResources:
    """Per-kernel resources as ptxas recorded them in the cubin (`.nv.info` attributes, section sizes).

    `None` means the cubin does not carry that attribute (not zero).
    """

    name: str
    demangled: str
    sm: int | None
    suffix: str = ""
    registers: int | None = None
    static_shared_bytes: int = 0
    local_bytes: int = 0  # `.nv.local.<k>` (older toolchains); modern ones use the stack frame
    stack_frame_bytes: int | None = None  # EIATTR_FRAME_SIZE: per-thread stack frame
    max_stack_bytes: int | None = None  # EIATTR_MAX_STACK_SIZE (or MIN_STACK_SIZE when only that exists)
    max_threads: int | None = None  # EIATTR_MAX_THREADS (launch bounds), threads per block
    param_bytes: int | None = None  # EIATTR_CBANK_PARAM_SIZE
    entry: int | None = None  # index into BinaryReport.entries of the cubin holding this kernel

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "demangled": self.demangled,
            "arch": f"sm_{self.sm}{self.suffix}" if self.sm is not None else None,
            "registers": self.registers,
            "static_shared_bytes": self.static_shared_bytes,
            "local_bytes": self.local_bytes,
            "stack_frame_bytes": self.stack_frame_bytes,
            "max_stack_bytes": self.max_stack_bytes,
            "max_threads": self.max_threads,
            "param_bytes": self.param_bytes,
            "entry": self.entry,
        }


@dataclass(frozen=True)
class BinaryReport:
    """Everything read from one file (or one member of a wheel/archive).

    `fatal` is set when nothing could be read at all (not an ELF, header unreadable); entry-level
    malformations go to `errors` and the rest of the file is still reported.
    """

    path: str
    member: str | None = None  # wheel/archive member path
    file_format: str = ""  # "elf-shared", "elf-executable", "elf-relocatable", "cubin", "fatbin", "ptx", ...
    size: int = 0
    entries: tuple[FatbinEntry, ...] = ()
    kernels: tuple[KernelResources, ...] = ()
    errors: tuple[str, ...] = ()
    fatal: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # e.g. Triton's JSON metadata

    @property
    def label(self) -> str:
        return f"{self.path}!{self.member}" if self.member else self.path

    @property
    def has_device_code(self) -> bool:
        return bool(self.entries)

    def loaded_entries(self) -> tuple[FatbinEntry, ...]:
        """Entries the CUDA runtime would load: the executable fatbin when the file has one, else the
        relocatable one (an -rdc object before device linking); never entries with errors."""
        executable = [e for e in self.entries if e.section != SECTION_RELOCATABLE]
        chosen = executable if executable else list(self.entries)
        return tuple(e for e in chosen if e.usable)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "member": self.member,
            "format": self.file_format,
            "size": self.size,
            "entries": [e.to_dict() for e in self.entries],
            "kernels": [k.to_dict() for k in self.kernels],
            "errors": list(self.errors),
            "fatal": self.fatal,
            "metadata": dict(self.metadata),
        }


def sm_to_cc(sm: int) -> tuple[int, int]:
    """sm number to compute capability: 90 -> (9, 0), 120 -> (12, 0), 121 -> (12, 1)."""
    return sm // 10, sm % 10
