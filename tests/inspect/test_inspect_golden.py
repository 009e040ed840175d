"""opgate's listing and per-kernel resources equal cuobjdump's, on every nvcc-built fixture.

The goldens are cuobjdump 13.x output recorded by scripts/build_inspect_fixtures.sh, so this runs
without cuobjdump; test_live_cuobjdump_agrees re-runs cuobjdump when it is installed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from inspect_helpers import BINARY_FIXTURES, FIXTURES, golden
from opgate.inspect.listing import listing_of, parse_listing, parse_resource_usage, resource_usage_of
from opgate.inspect.model import KIND_PTX, KIND_SASS
from opgate.inspect.sources import inspect_paths


def test_every_case_of_the_issue_has_a_fixture():
    names = set(BINARY_FIXTURES)
    for required in ("multi.o", "ptx_only.o", "sass_only.o", "sm90a.o", "compress_all.o", "compress_size.o",
                     "compress_speed.o", "compress_none.o", "rdc.o", "blackwell.o", "kernels.fatbin",
                     "sm89.cubin", "libkernels.so", "libkernels.a", "rdc_app"):
        assert required in names


@pytest.mark.parametrize("name", BINARY_FIXTURES)
@pytest.mark.parametrize("kind,flag", [(KIND_SASS, "list-elf"), (KIND_PTX, "list-ptx")])
def test_listing_equals_cuobjdump_golden(name, kind, flag):
    reports = inspect_paths([FIXTURES / name])
    assert listing_of(reports, kind) == parse_listing(golden(name, flag))


@pytest.mark.parametrize("name", BINARY_FIXTURES)
def test_kernel_resources_equal_cuobjdump_golden(name):
    reports = inspect_paths([FIXTURES / name], kernels=True)
    ours = [cubin for report in reports for cubin in resource_usage_of(report)]
    theirs = parse_resource_usage(golden(name, "res-usage"))
    assert ours == theirs
    assert all(not r.errors and not r.fatal for r in reports)


def test_goldens_cover_registers_shared_and_stack():
    """The fixtures are chosen so the comparison is not trivially zero everywhere."""
    usage = parse_resource_usage(golden("multi.o", "res-usage"))
    values = [u for cubin in usage for u in cubin.values()]
    assert any(reg > 0 for reg, _, _, _ in values)
    assert any(stack > 0 for _, stack, _, _ in values)
    assert any(shared > 0 for _, _, shared, _ in values)


@pytest.mark.parametrize("name", BINARY_FIXTURES)
def test_live_cuobjdump_agrees(cuobjdump, name):
    path = FIXTURES / name
    reports = inspect_paths([path], kernels=True)
    for kind, flag in ((KIND_SASS, "--list-elf"), (KIND_PTX, "--list-ptx")):
        out = subprocess.run([cuobjdump, flag, str(path)], capture_output=True, text=True, timeout=60).stdout
        assert listing_of(reports, kind) == parse_listing(out)
    out = subprocess.run([cuobjdump, "--dump-resource-usage", str(path)], capture_output=True, text=True,
                         timeout=60).stdout
    assert [c for r in reports for c in resource_usage_of(r)] == parse_resource_usage(out)


def test_golden_files_exist_for_every_fixture():
    for name in BINARY_FIXTURES:
        for kind in ("list-elf", "list-ptx", "res-usage"):
            assert (FIXTURES / "golden" / f"{Path(name).name}.{kind}.txt").is_file(), (name, kind)
