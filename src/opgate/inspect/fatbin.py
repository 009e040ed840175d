"""Parser for fatbin containers (`.nv_fatbin`, `__nv_relfatbin`, standalone `.fatbin` files).

Layout: cuda-facts.md §3 (container header of 16 bytes, entry headers of 64 bytes or more; always
advance by the header-size field). Listing reads headers only; payloads are decompressed only by
`entry_payload`, with a hard cap on the size. Every malformation becomes an error string on the entry
(or on the parse) and the walk goes on with what can still be trusted; nothing raises out of here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, replace
from typing import Union

from opgate.inspect.model import KIND_PTX, KIND_SASS, FatbinEntry

Buffer = Union[bytes, bytearray, memoryview, "mmap.mmap"]  # noqa: F821 - anything with find/unpack_from

CONTAINER_MAGIC = 0xBA55ED50
CONTAINER_MAGIC_BYTES = struct.pack("<I", CONTAINER_MAGIC)
CONTAINER_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of what follows
ENTRY_HEADER = struct.Struct("<HHIIIIIHHIIIQQQ")  # 64 bytes, see cuda-facts.md §3c
ENTRY_HEADER_MIN = ENTRY_HEADER.size
# Observed entry header sizes are 64..120 bytes; anything far beyond is a corrupt field, and trusting
# it would skip real entries.
ENTRY_HEADER_MAX = 4096

ENTRY_KINDS = {1: KIND_PTX, 2: KIND_SASS}

# Entry flags (cuda-facts.md §3d; the a/f bits observed on nvcc 13.0 output: sm_90a/sm_120a entries
# carry 0x100000, sm_100f entries 0x200000, and cuobjdump names them accordingly).
FLAG_COMPRESS_OLD = 0x1000
FLAG_LZ4 = 0x2000
FLAG_ZSTD = 0x8000
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY_SPECIFIC = 0x200000

# No payload of a real fatbin comes near this; a header that claims more is refused (decompression bomb).
MAX_DECOMPRESSED_BYTES = 512 * 1024 * 1024
# An LZ4 block cannot expand more than ~255x (a match-length byte adds at most 255 bytes), so a larger
# claimed size is a corrupt header; checked before lz4 allocates the output buffer.
LZ4_MAX_RATIO = 255
_ZSTD_CHUNK = 1 << 20


class PayloadError(Exception):
    """An entry's payload cannot be produced (corrupt, truncated, too large, unknown compression)."""


@dataclass
class FatbinParse:
    entries: list[FatbinEntry] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    containers: int = 0


def compression_of(flags: int) -> str:
    if flags & FLAG_ZSTD:
        return "zstd"
    if flags & FLAG_LZ4:
        return "lz4"
    if flags & FLAG_COMPRESS_OLD:
        return "unknown"
    return "none"


def suffix_of(flags: int) -> str:
    if flags & FLAG_ARCH_SPECIFIC:
        return "a"
    if flags & FLAG_FAMILY_SPECIFIC:
        return "f"
    return ""


def parse_fatbin(data: Buffer, start: int = 0, end: int | None = None, section: str = "") -> FatbinParse:
    """Walk the containers in `data[start:end]` (a section, or a whole .fatbin file).

    Offsets in the result are absolute positions in `data`. Containers may follow each other
    back-to-back; zero padding between them is skipped.
    """
    end = len(data) if end is None else min(end, len(data))
    result = FatbinParse()
    offset = start
    while offset < end:
        remaining = end - offset
        if remaining < CONTAINER_HEADER.size:
            if any(data[offset:end]):
                result.errors.append(f"{section or 'fatbin'}: {remaining} trailing bytes at offset {offset:#x} "
                                     "are too short for a container header (truncated)")
            break
        magic, version, header_size, fat_size = CONTAINER_HEADER.unpack_from(data, offset)
        if magic != CONTAINER_MAGIC:
            nxt = data.find(CONTAINER_MAGIC_BYTES, offset + 1, end)
            gap_end = end if nxt < 0 else nxt
            if any(data[offset:gap_end]):
                result.errors.append(
                    f"{section or 'fatbin'}: bad container magic {magic:#010x} at offset {offset:#x} "
                    f"(expected {CONTAINER_MAGIC:#010x}); skipped {gap_end - offset} bytes"
                    + ("" if nxt >= 0 else " to the end"))
            if nxt < 0:
                break
            offset = nxt
            continue
        index = result.containers
        result.containers += 1
        if header_size < CONTAINER_HEADER.size or header_size > remaining:
            result.errors.append(f"{section or 'fatbin'}: container {index} at {offset:#x} has header size "
                                 f"{header_size} (expected 16); skipped")
            offset = _next_container(data, offset + 1, end)
            continue
        body_start = offset + header_size
        body_end = body_start + fat_size
        if body_end > end:
            result.errors.append(f"{section or 'fatbin'}: container {index} at {offset:#x} claims {fat_size} bytes "
                                 f"but only {end - body_start} remain (truncated or size field corrupt)")
            body_end = end
        _walk_entries(data, body_start, body_end, section, index, result)
        offset = body_end
    return result


def _next_container(data: Buffer, offset: int, end: int) -> int:
    nxt = data.find(CONTAINER_MAGIC_BYTES, offset, end)
    return end if nxt < 0 else nxt


def _walk_entries(data: Buffer, offset: int, end: int, section: str, container: int, result: FatbinParse) -> None:
    where = f"{section or 'fatbin'} container {container}"
    while offset < end:
        if end - offset < ENTRY_HEADER_MIN:
            if any(data[offset:end]):
                result.errors.append(f"{where}: {end - offset} bytes at {offset:#x} are too short for an entry "
                                     "header (truncated)")
            return
        (kind_code, _header_version, header_size, padded_size, padded_high, payload_size, _unknown,
         minor, major, arch, _name_off, _name_len, flags, _zero, uncompressed) = ENTRY_HEADER.unpack_from(data, offset)
        padded = padded_size | (padded_high << 32)
        kind = ENTRY_KINDS.get(kind_code, f"kind-{kind_code:#x}")
        compression = compression_of(flags)
        error = None
        if header_size < ENTRY_HEADER_MIN or header_size > ENTRY_HEADER_MAX:
            error = f"entry header size {header_size} is out of range ({ENTRY_HEADER_MIN}..{ENTRY_HEADER_MAX})"
        elif offset + header_size + padded > end:
            error = (f"payload of {padded} bytes at {offset + header_size:#x} runs past the end of its "
                     f"container at {end:#x} (truncated or size field corrupt)")
        elif compression != "none" and payload_size > padded:
            error = f"compressed size {payload_size} exceeds the entry's slot of {padded} bytes (overlaps the next entry)"
        elif compression != "none" and uncompressed > MAX_DECOMPRESSED_BYTES:
            error = f"claims {uncompressed} bytes once decompressed, over the {MAX_DECOMPRESSED_BYTES} byte cap"
        elif compression == "unknown":
            error = f"compressed with an unsupported scheme (flags {flags:#x})"
        stored = payload_size if compression != "none" else padded
        entry = FatbinEntry(
            kind=kind,
            sm=arch if 0 < arch < 1000 else None,
            suffix=suffix_of(flags),
            ptx_isa=f"{major}.{minor}" if kind == KIND_PTX else None,
            code_version=f"{major}.{minor}",
            compression=compression,
            section=section,
            container=container,
            offset=offset,
            header_size=header_size,
            payload_size=stored,
            uncompressed_size=uncompressed if compression != "none" else None,
            flags=flags,
            error=error if error is None else f"{where}, entry at {offset:#x}: {error}",
        )
        if entry.error is None and entry.sm is None:
            entry = _with_error(entry, f"{where}, entry at {offset:#x}: architecture field {arch} is not an SM number")
        result.entries.append(entry)
        if header_size < ENTRY_HEADER_MIN or header_size > ENTRY_HEADER_MAX or offset + header_size + padded > end:
            return  # the sizes cannot be trusted: nothing after this entry in the container can be located
        offset += header_size + padded


def _with_error(entry: FatbinEntry, error: str) -> FatbinEntry:
    return replace(entry, error=error)


def entry_payload(data: Buffer, entry: FatbinEntry, cap: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """The entry's image (cubin ELF bytes or PTX text bytes), decompressed when needed.

    Raises PayloadError with a one-line reason; never returns more than `cap` bytes.
    """
    if entry.error is not None:
        raise PayloadError(entry.error)
    start = entry.offset + entry.header_size
    stored = bytes(data[start:start + entry.payload_size])
    if len(stored) != entry.payload_size:
        raise PayloadError(f"payload at {start:#x} is truncated ({len(stored)} of {entry.payload_size} bytes)")
    if entry.compression == "none":
        return stored
    expected = entry.uncompressed_size or 0
    if expected <= 0:
        raise PayloadError(f"compressed entry at {entry.offset:#x} declares no uncompressed size")
    if expected > cap:
        raise PayloadError(f"entry at {entry.offset:#x} claims {expected} bytes once decompressed, over the {cap} cap")
    if entry.compression == "lz4":
        return _lz4_block(stored, expected, entry.offset)
    if entry.compression == "zstd":
        return _zstd(stored, expected, entry.offset)
    raise PayloadError(f"entry at {entry.offset:#x} uses an unsupported compression (flags {entry.flags:#x})")


def _lz4_block(stored: bytes, expected: int, where: int) -> bytes:
    import lz4.block

    if expected > LZ4_MAX_RATIO * len(stored) + 64:
        raise PayloadError(f"LZ4 payload of the entry at {where:#x} claims {expected} bytes from {len(stored)}, "
                           f"more than LZ4 can expand; the size field is corrupt")
    try:
        out = lz4.block.decompress(stored, uncompressed_size=expected)
    except Exception as exc:  # lz4 raises LZ4BlockError (and ValueError/MemoryError on absurd sizes)
        raise PayloadError(f"LZ4 payload of the entry at {where:#x} is corrupt: {exc}") from None
    if len(out) != expected:
        raise PayloadError(f"LZ4 payload of the entry at {where:#x} gave {len(out)} bytes, header says {expected}")
    return out


def _zstd(stored: bytes, expected: int, where: int) -> bytes:
    import zstandard

    # Streaming read in chunks, bounded by the header's size: memory follows the real output, and a
    # frame that claims more than the header is stopped one byte past it.
    chunks: list[bytes] = []
    produced = 0
    try:
        with zstandard.ZstdDecompressor().stream_reader(stored, read_across_frames=False) as reader:
            while produced <= expected:
                chunk = reader.read(min(_ZSTD_CHUNK, expected + 1 - produced))
                if not chunk:
                    break
                chunks.append(chunk)
                produced += len(chunk)
    except zstandard.ZstdError as exc:
        raise PayloadError(f"zstd payload of the entry at {where:#x} is corrupt: {exc}") from None
    out = b"".join(chunks)
    if len(out) != expected:
        raise PayloadError(f"zstd payload of the entry at {where:#x} gave {len(out)} bytes, header says {expected}")
    return out


def strip_ptx_padding(payload: bytes) -> bytes:
    """PTX images carry trailing NUL padding."""
    return payload.rstrip(b"\0")
