"""`--deep`: fatbins a library embeds in its data sections and loads itself (as cuFFT 12 does) are found
only when asked for, and only containers that parse cleanly count."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from opgate_testing import DATA, run_opgate

from opgate.inspect.sources import inspect_file

FATBIN = DATA / "inspect" / "kernels.fatbin"


@pytest.fixture(scope="module")
def library_with_embedded_fatbin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the host library")
    folder = tmp_path_factory.mktemp("embedded")
    blob = FATBIN.read_bytes()
    # A decoy first: the container magic by chance in ordinary data must not count as code.
    decoy = "0x50,0xed,0x55,0xba,0x01,0x00,0x10,0x00,0xff,0xff,0xff,0xff,0x00,0x00,0x00,0x00"
    body = ",".join(str(b) for b in blob)
    (folder / "embed.c").write_text(
        f"__attribute__((aligned(8))) const unsigned char decoy[] = {{{decoy}}};\n"
        f"__attribute__((aligned(8))) const unsigned char kernels_fatbin[] = {{{body}}};\n"
        "const unsigned char *get_kernels(void) { return kernels_fatbin; }\n")
    library = folder / "libembedded.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(folder / "embed.c")], check=True)
    return library


def test_embedded_fatbin_is_found_only_with_deep(library_with_embedded_fatbin: Path) -> None:
    [plain] = inspect_file(FATBIN)
    shallow = inspect_file(library_with_embedded_fatbin, explicit=True)
    assert all(not r.entries for r in shallow)
    [deep] = inspect_file(library_with_embedded_fatbin, deep=True)
    listing = sorted((e.kind, e.sm, e.ptx_isa) for e in deep.entries)
    assert listing == sorted((e.kind, e.sm, e.ptx_isa) for e in plain.entries)
    assert all("embedded" in e.section for e in deep.entries)
    assert not deep.errors  # the decoy magic is ignored, not reported as damage


def test_cli_deep_flag(library_with_embedded_fatbin: Path) -> None:
    out = run_opgate(["inspect", str(library_with_embedded_fatbin), "--deep", "--targets", "sm_90"])
    assert "sm_" in out.stdout
    assert out.returncode in (0, 1), out.stderr
