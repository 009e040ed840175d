"""The fatbin parser on nvcc's real output: compression kinds, entry headers, payloads, and what it
does with damaged containers (an error on the entry, the rest still reported, never an exception)."""

from __future__ import annotations

import struct

import pytest

from inspect_helpers import FIXTURES
from opgate.inspect.cubin import cubin_arch
from opgate.inspect.fatbin import (
    MAX_DECOMPRESSED_BYTES,
    PayloadError,
    entry_payload,
    parse_fatbin,
    strip_ptx_padding,
)
from opgate.inspect.model import KIND_PTX, KIND_SASS
from opgate.inspect.ptx import parse_ptx
from opgate.inspect.sources import inspect_paths

FATBIN = (FIXTURES / "kernels.fatbin").read_bytes()


def _compression(name: str) -> dict[str, set[str]]:
    report = inspect_paths([FIXTURES / name])[0]
    out: dict[str, set[str]] = {}
    for entry in report.entries:
        out.setdefault(entry.kind, set()).add(entry.compression)
    return out


@pytest.mark.parametrize("name,expected", [
    ("multi.o", {KIND_SASS: {"none"}, KIND_PTX: {"zstd"}}),  # nvcc 13 default: PTX compressed only
    ("compress_all.o", {KIND_SASS: {"zstd"}, KIND_PTX: {"zstd"}}),  # -Xfatbin=-compress-all
    ("compress_size.o", {KIND_SASS: {"zstd"}, KIND_PTX: {"zstd"}}),  # --compress-mode=size
    ("compress_speed.o", {KIND_SASS: {"none"}, KIND_PTX: {"lz4"}}),  # --compress-mode=speed
    ("compress_none.o", {KIND_SASS: {"none"}, KIND_PTX: {"none"}}),  # --compress-mode=none
])
def test_compression_kind_per_nvcc_mode(name, expected):
    assert _compression(name) == expected


def test_extended_entry_headers_are_walked_by_their_size_field():
    sizes = {e.header_size for e in inspect_paths([FIXTURES / "blackwell.o"])[0].entries}
    assert 112 in sizes and 80 in sizes  # sm_100+ SASS entries carry 112-byte headers
    sizes = {e.header_size for e in inspect_paths([FIXTURES / "rdc.o"])[0].entries}
    assert 96 in sizes  # -rdc PTX carries ptxas options in a 96-byte header


def test_suffixes_from_entry_flags():
    archs = [e.arch for e in inspect_paths([FIXTURES / "blackwell.o"])[0].entries if e.kind == KIND_SASS]
    assert archs == ["sm_100f", "sm_120a", "sm_103"]
    entries = inspect_paths([FIXTURES / "sm90a.o"])[0].entries
    assert [(e.kind, e.arch) for e in entries] == [(KIND_SASS, "sm_90a"), (KIND_PTX, "sm_90a")]


@pytest.mark.parametrize("name", ["multi.o", "compress_all.o", "compress_size.o", "compress_speed.o",
                                  "compress_none.o", "rdc.o", "blackwell.o", "sm90a.o", "kernels.fatbin"])
def test_every_payload_decompresses_and_matches_its_header(name):
    """SASS payloads are cubins of the header's arch; PTX payloads declare the header's ISA and target."""
    data = (FIXTURES / name).read_bytes()
    report = inspect_paths([FIXTURES / name])[0]
    assert report.entries
    for entry in report.entries:
        payload = entry_payload(data, entry)
        if entry.kind == KIND_SASS:
            assert payload[:4] == b"\x7fELF"
            assert cubin_arch(payload) == (entry.sm, entry.suffix)
        else:
            info = parse_ptx(strip_ptx_padding(payload).decode())
            assert (info.isa, info.sm, info.suffix) == (entry.ptx_isa, entry.sm, entry.suffix)


def test_listing_reads_headers_only(monkeypatch):
    """Listing never decompresses: the payload reader is not even called."""
    import opgate.inspect.sources as sources

    def refuse(*_args, **_kwargs):
        raise AssertionError("listing must not read payloads")

    monkeypatch.setattr(sources, "entry_payload", refuse)
    report = inspect_paths([FIXTURES / "compress_all.o"])[0]
    assert len(report.entries) == 4 and not report.errors


# -- damaged inputs -----------------------------------------------------------------------------------------

def _entries(data: bytes):
    parsed = parse_fatbin(data)
    return parsed, [(e.kind, e.arch, e.error is None) for e in parsed.entries]


def test_reference_fatbin_is_clean():
    parsed, entries = _entries(FATBIN)
    assert not parsed.errors
    assert entries == [(KIND_SASS, "sm_75", True), (KIND_SASS, "sm_80", True), (KIND_SASS, "sm_90", True),
                       (KIND_PTX, "sm_90", True)]


@pytest.mark.parametrize("cut", [1, 15, 16, 17, 63, 64, 65, 1000, len(FATBIN) // 2, len(FATBIN) - 1])
def test_truncation_is_an_error_and_earlier_entries_survive(cut):
    parsed = parse_fatbin(FATBIN[:cut])
    errors = parsed.errors + [e.error for e in parsed.entries if e.error]
    assert errors, cut
    assert all("\n" not in e for e in errors)
    intact = [e for e in parsed.entries if e.error is None]
    for entry in intact:  # whatever is still reported as fine really is intact
        assert entry.offset + entry.header_size + entry.payload_size <= cut


def test_bad_magic_skips_to_the_next_container():
    two = FATBIN + FATBIN
    broken = b"\xde\xad\xbe\xef" + two[4:]
    parsed = parse_fatbin(broken)
    assert any("bad container magic" in e for e in parsed.errors)
    assert [e.arch for e in parsed.entries if e.usable] == ["sm_75", "sm_80", "sm_90", "sm_90"]


def test_container_size_past_the_end():
    data = bytearray(FATBIN)
    struct.pack_into("<Q", data, 8, len(FATBIN) * 10)
    parsed = parse_fatbin(bytes(data))
    assert any("claims" in e and "remain" in e for e in parsed.errors)
    assert len([e for e in parsed.entries if e.usable]) == 4


def test_entry_size_past_the_end_flags_that_entry():
    data = bytearray(FATBIN)
    second = parse_fatbin(FATBIN).entries[1].offset
    struct.pack_into("<I", data, second + 8, 0x7FFFFFFF)  # padded payload size
    parsed = parse_fatbin(bytes(data))
    assert parsed.entries[0].usable
    assert "runs past the end" in (parsed.entries[1].error or "")


def test_overlapping_compressed_payload_is_an_error():
    data = bytearray((FIXTURES / "compress_all.o").read_bytes())
    report = inspect_paths([FIXTURES / "compress_all.o"])[0]
    first = report.entries[0]
    struct.pack_into("<I", data, first.offset + 16, first.payload_size + 4096)  # compressed size > its slot
    start = report.entries[0].offset - 16
    parsed = parse_fatbin(bytes(data), start, start + 16 + sum(e.header_size + _slot(e) for e in report.entries))
    assert "overlaps the next entry" in (parsed.entries[0].error or "")
    assert all(e.usable for e in parsed.entries[1:])


def _slot(entry) -> int:
    return (entry.payload_size + 7) // 8 * 8


def test_header_size_out_of_range_stops_that_container_only():
    data = bytearray(FATBIN)
    struct.pack_into("<I", data, 16 + 4, 8)  # first entry header size 8 < 64
    parsed = parse_fatbin(bytes(data) + FATBIN)
    assert "header size 8" in (parsed.entries[0].error or "")
    assert [e.arch for e in parsed.entries if e.usable] == ["sm_75", "sm_80", "sm_90", "sm_90"]  # 2nd container


def test_decompression_bomb_is_refused_before_allocation():
    data = bytearray((FIXTURES / "compress_all.o").read_bytes())
    report = inspect_paths([FIXTURES / "compress_all.o"])[0]
    first = report.entries[0]
    struct.pack_into("<Q", data, first.offset + 56, MAX_DECOMPRESSED_BYTES + 1)
    start = first.offset - 16
    parsed = parse_fatbin(bytes(data), start)
    assert "cap" in (parsed.entries[0].error or "")
    with pytest.raises(PayloadError):
        entry_payload(bytes(data), parsed.entries[0])


@pytest.mark.parametrize("name,index", [("compress_all.o", 0), ("compress_speed.o", 3)])
def test_corrupt_compressed_payload_is_a_payload_error(name, index):
    """zstd (compress_all SASS) and LZ4 (compress_speed PTX) payloads with garbage in the middle."""
    data = bytearray((FIXTURES / name).read_bytes())
    entry = inspect_paths([FIXTURES / name])[0].entries[index]
    assert entry.compression in ("zstd", "lz4")
    middle = entry.offset + entry.header_size + entry.payload_size // 3
    data[middle:middle + 64] = bytes(range(64))
    with pytest.raises(PayloadError) as info:
        entry_payload(bytes(data), entry)
    assert str(info.value).count("\n") == 0


def test_lz4_size_beyond_what_lz4_can_expand_is_refused():
    data = bytearray((FIXTURES / "compress_speed.o").read_bytes())
    report = inspect_paths([FIXTURES / "compress_speed.o"])[0]
    entry = next(e for e in report.entries if e.compression == "lz4")
    from dataclasses import replace

    with pytest.raises(PayloadError, match="more than LZ4 can expand"):
        entry_payload(bytes(data), replace(entry, uncompressed_size=entry.payload_size * 1000))


def test_kernels_request_reports_corrupt_payload_as_an_error(tmp_path):
    data = bytearray((FIXTURES / "compress_all.o").read_bytes())
    entry = inspect_paths([FIXTURES / "compress_all.o"])[0].entries[1]
    middle = entry.offset + entry.header_size + 100
    data[middle:middle + 32] = b"\x00" * 32
    path = tmp_path / "broken.o"
    path.write_bytes(bytes(data))
    report = inspect_paths([path], kernels=True)[0]
    # nvcc's zstd frames carry no checksum, so garbage may decompress; the cubin reader then objects
    assert report.errors and all(e.startswith("sm_80 entry") for e in report.errors)
    assert {k.sm for k in report.kernels} == {75, 90}  # the other cubins still give their kernels
