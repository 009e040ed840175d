"""Inputs: wheels read in place, directories, static archives, Triton caches, and unreadable paths."""

from __future__ import annotations

import os
import shutil
import zipfile

import pytest

from inspect_helpers import FIXTURES
from opgate.model.errors import InputError
from opgate.inspect.model import SECTION_EXECUTABLE, SECTION_RELOCATABLE
from opgate.inspect.sources import inspect_paths


def _archs(report):
    return [(e.kind, e.arch) for e in report.entries]


def test_wheel_members_are_read_from_the_zip(tmp_path):
    wheel = tmp_path / "demo-1.0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.write(FIXTURES / "libkernels.so", "demo/lib/libkernels.so")
        archive.write(FIXTURES / "multi.o", "demo/multi.o")
        archive.writestr("demo/__init__.py", "")
        archive.writestr("demo-1.0.dist-info/RECORD", "")
    before = set(os.listdir(tmp_path))
    reports = inspect_paths([wheel], kernels=True)
    assert set(os.listdir(tmp_path)) == before  # nothing unpacked
    by_member = {r.member: r for r in reports}
    assert set(by_member) == {"demo/lib/libkernels.so", "demo/multi.o"}
    direct = inspect_paths([FIXTURES / "multi.o"], kernels=True)[0]
    assert _archs(by_member["demo/multi.o"]) == _archs(direct)
    assert len(by_member["demo/multi.o"].kernels) == len(direct.kernels) == 12
    assert by_member["demo/lib/libkernels.so"].file_format == "elf-shared"


def test_wheel_without_device_code_says_so(tmp_path):
    wheel = tmp_path / "plain-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("plain/__init__.py", "x = 1\n")
    (report,) = inspect_paths([wheel])
    assert report.file_format == "wheel" and not report.entries and not report.fatal


def test_damaged_wheel_is_a_fatal_report(tmp_path):
    wheel = tmp_path / "broken-1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    (report,) = inspect_paths([wheel])
    assert report.fatal and "zip" in report.fatal


def test_directory_walk_finds_device_code_and_triton_entries():
    reports = inspect_paths([FIXTURES])
    names = {os.path.relpath(r.path, FIXTURES) + (f"!{r.member}" if r.member else "") for r in reports}
    assert {"multi.o", "kernels.fatbin", "kernels.ptx", "libkernels.so", "rdc_app",
            "libkernels.a!ptx_only.o", "libkernels.a!sass_only.o"} <= names
    triton = [r for r in reports if r.file_format == "triton-cubin"]
    assert len(triton) == 1
    assert triton[0].metadata["triton"]["num_warps"] == 4
    assert triton[0].metadata["triton"]["target"]["arch"] == 90
    # Triton's .ptx beside the cubin is not loaded at run time, so it is not reported
    assert not any(r.path.endswith("add_kernel.ptx") for r in reports)
    # no golden text, sources or JSON show up
    assert not any(r.path.endswith((".txt", ".cu", ".json")) for r in reports)


def test_archive_members():
    reports = inspect_paths([FIXTURES / "libkernels.a"])
    assert {r.member: _archs(r) for r in reports} == {"ptx_only.o": [("ptx", "sm_80")],
                                                     "sass_only.o": [("sass", "sm_86")]}


def test_rdc_executable_loads_the_executable_fatbin_only():
    (report,) = inspect_paths([FIXTURES / "rdc_app"])
    sections = {e.section for e in report.entries}
    assert sections == {SECTION_EXECUTABLE, SECTION_RELOCATABLE}
    assert {e.section for e in report.loaded_entries()} == {SECTION_EXECUTABLE}
    (relocatable,) = inspect_paths([FIXTURES / "rdc.o"])
    assert {e.section for e in relocatable.loaded_entries()} == {SECTION_RELOCATABLE}


@pytest.mark.parametrize("make,message", [
    (lambda d: d / "missing.so", "no such file"),
    (lambda d: _write(d / "notes.txt", b"hello"), "not an ELF binary"),
    (lambda d: _write(d / "empty.so", b""), "empty"),
])
def test_unreadable_inputs_raise_one_line_input_errors(tmp_path, make, message):
    with pytest.raises(InputError, match=message) as info:
        inspect_paths([make(tmp_path)])
    assert "\n" not in str(info.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files regardless of permissions")
def test_permission_denied_is_an_input_error(tmp_path):
    path = _write(tmp_path / "secret.so", b"\x7fELF")
    path.chmod(0)
    with pytest.raises(InputError, match="cannot be opened"):
        inspect_paths([path])


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_truncated_shared_library_still_reports_what_survives(tmp_path):
    data = (FIXTURES / "libkernels.so").read_bytes()
    path = _write(tmp_path / "libtrunc.so", data[: len(data) * 2 // 3])
    (report,) = inspect_paths([path])
    assert not report.fatal
    assert report.errors and "scanning" in report.errors[0]
    assert any(e.usable for e in report.entries)


def test_garbage_elf_is_fatal(tmp_path):
    path = _write(tmp_path / "bad.so", b"\x7fELF" + b"\xff" * 200)
    (report,) = inspect_paths([path])
    assert report.fatal and "ELF" in report.fatal


def test_symlinks_are_not_reported_twice(tmp_path):
    shutil.copy(FIXTURES / "multi.o", tmp_path / "multi.o")
    (tmp_path / "alias.o").symlink_to(tmp_path / "multi.o")
    reports = inspect_paths([tmp_path])
    assert [os.path.basename(r.path) for r in reports] == ["multi.o"]
