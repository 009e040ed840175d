"""Fresh fixtures from this machine's nvcc, so the parser is checked against today's toolchain too
(the committed fixtures pin CUDA 13.0's output). Skipped where nvcc is absent."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from inspect_helpers import FIXTURES, find_cuobjdump
from opgate.inspect.listing import listing_of, parse_listing, parse_resource_usage, resource_usage_of
from opgate.inspect.model import KIND_PTX, KIND_SASS
from opgate.inspect.sources import inspect_paths

BUILDS = {
    "fresh_multi.o": ["-c", "-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"],
    "fresh_sm90a_size.o": ["-c", "-gencode", "arch=compute_90a,code=[sm_90a,compute_90a]", "--compress-mode=size"],
    "fresh_rdc_speed.o": ["-c", "-rdc=true", "-gencode", "arch=compute_80,code=[sm_80,compute_80]",
                          "--compress-mode=speed", "-Xfatbin=-compress-all"],
}
EXPECTED = {
    "fresh_multi.o": ([("sass", "sm_75"), ("sass", "sm_90"), ("ptx", "sm_90")], {"none", "zstd"}),
    "fresh_sm90a_size.o": ([("sass", "sm_90a"), ("ptx", "sm_90a")], {"zstd"}),
    "fresh_rdc_speed.o": ([("sass", "sm_80"), ("ptx", "sm_80")], {"lz4"}),
}


@pytest.fixture(scope="module")
def fresh(nvcc, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fresh")
    procs = [subprocess.Popen([nvcc, *args, "-o", str(out / name), str(FIXTURES / "kernels.cu")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name, args in BUILDS.items()]
    for proc in procs:
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, output
    return out


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_fresh_build_entries(fresh, name):
    (report,) = inspect_paths([fresh / name], kernels=True)
    archs, compression = EXPECTED[name]
    assert [(e.kind, e.arch) for e in report.entries] == archs
    assert {e.compression for e in report.entries} == compression
    assert not report.errors
    assert {k.name for k in report.kernels} >= {"tile_sum", "_Z13local_scratchPKiPfi"}


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_fresh_build_matches_cuobjdump(fresh, name):
    tool = find_cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found (nvidia-cuda-cuobjdump wheel): only the expected archs are checked")
    path = fresh / name
    reports = inspect_paths([path], kernels=True)
    for kind, flag in ((KIND_SASS, "--list-elf"), (KIND_PTX, "--list-ptx")):
        out = subprocess.run([tool, flag, str(path)], capture_output=True, text=True, timeout=60).stdout
        assert listing_of(reports, kind) == parse_listing(out)
    out = subprocess.run([tool, "--dump-resource-usage", str(path)], capture_output=True, text=True, timeout=60).stdout
    assert [c for r in reports for c in resource_usage_of(r)] == parse_resource_usage(out)
