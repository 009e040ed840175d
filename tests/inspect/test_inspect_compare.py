"""`opgate inspect --compare`: one CUDA source (tests/data/toolchain/kernels.cu) built by nvcc and by clang.

The committed builds (tests/data/toolchain/build.sh: nvcc 13.0; clang 19.1.7 on CUDA 12.5 headers) are always
compared; fresh nvcc builds with other -gencode sets plant the differences the comparison must call out; a fresh
clang build runs where clang is installed (skipped with the reason elsewhere).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from inspect_helpers import REPO
from opgate.inspect.compare import BREAKS, DIFFERS, compare_builds, comparison_rows
from opgate.inspect.compat import parse_targets
from opgate.inspect.sources import inspect_paths

TOOLCHAIN = REPO / "tests" / "data" / "toolchain"
NVCC_BUILD = TOOLCHAIN / "kernels_nvcc.o"
CLANG_BUILD = TOOLCHAIN / "kernels_clang.o"
KERNELS = {"saxpy", "block_scan", "_Z7row_sumILi128EEvPKfPfi", "_Z7row_sumILi256EEvPKfPfi",
           "_Z9transposeIfEvPKT_PS0_ii", "_Z9transposeIdEvPKT_PS0_ii"}
FLEET = "h200@580.65.06,a100@535.104.05,b200@570.86.10"


def compare(a: Path, b: Path, targets: str = FLEET):
    return compare_builds(a.name, inspect_paths([a], kernels=True), b.name, inspect_paths([b], kernels=True),
                          parse_targets(targets) if targets else [])


def messages(comparison, severity: str) -> list[str]:
    return [f"{f.kernel}: {f.message}" for f in comparison.findings if f.severity == severity]


def test_both_builds_carry_every_kernel_with_sass_and_ptx():
    comparison = compare(NVCC_BUILD, CLANG_BUILD)
    assert set(comparison.a.kernels) == set(comparison.b.kernels) == KERNELS
    for side, isa in ((comparison.a, "9.0"), (comparison.b, "8.5")):
        for kernel in side.kernels.values():
            assert kernel.sass == ("sm_80", "sm_90")
            assert kernel.ptx == (f"compute_90 (ISA {isa})",)
            assert kernel.ptx_per_kernel  # each kernel found by name in the PTX text
            assert [r.registers is not None for r in kernel.resources] == [True, True]


def test_nvcc_vs_clang_differences_are_called_out():
    comparison = compare(NVCC_BUILD, CLANG_BUILD)
    breaks = messages(comparison, BREAKS)
    # nvcc 13.0 writes PTX ISA 9.0; a CUDA 12.8 driver (570) JITs at most 8.7, and B200 has no SASS in either
    assert len(breaks) == 6 and all("kernels_nvcc.o cannot run it on b200" in m and "PTX ISA 9.0" in m
                                    for m in breaks)
    differs = messages(comparison, DIFFERS)
    assert sum("PTX ISA 9.0 (driver >= 580.65.06, CUDA 13.0) in kernels_nvcc.o vs 8.5" in m for m in differs) == 6
    registers = [m for m in differs if "registers" in m]
    # row_sum: nvcc 31 registers, clang 15/16: the only kernels past the 25% margin on this source
    assert registers and all(m.startswith("void row_sum<") for m in registers)
    assert comparison.breaks
    rows = dict((f, (a, b)) for f, a, b in comparison_rows(comparison, "saxpy"))
    assert rows["on b200 @570.86.10"] == ("unsupported", "jit")
    assert rows["on h200 @580.65.06"] == ("native", "native")


def test_a_build_compared_with_itself_agrees():
    comparison = compare(CLANG_BUILD, CLANG_BUILD, "h200@580.65.06,a100")
    assert comparison.findings == ()


def test_default_targets_are_the_archs_either_build_carries():
    comparison = compare(NVCC_BUILD, CLANG_BUILD, "")
    assert [t.label for t in comparison.targets] == ["sm_80", "sm_90"]
    assert not comparison.breaks  # both carry SASS for both; only register and PTX ISA differences remain


def test_cli_compare_exit_codes(tmp_path, opgate_env):
    base = [sys.executable, "-m", "opgate", "inspect", "--compare"]
    run = subprocess.run([*base, str(NVCC_BUILD), str(CLANG_BUILD), "--targets", FLEET, "--json",
                          str(tmp_path / "c.json"), "--markdown", str(tmp_path / "c.md")], capture_output=True,
                         text=True, env=opgate_env, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "6 breaking" in run.stdout and "registers 31 (kernels_nvcc.o)" in run.stdout
    import json

    report = json.loads((tmp_path / "c.json").read_text())
    assert {r["outcome"] for r in report["results"]} == {"failed"}
    assert (tmp_path / "c.md").read_text().startswith("## opgate inspect: FAILED")  # --compare writes it too
    ok = subprocess.run([*base, str(NVCC_BUILD), str(CLANG_BUILD), "--targets", "h200,a100"], capture_output=True,
                        text=True, env=opgate_env, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    one = subprocess.run([*base, str(NVCC_BUILD)], capture_output=True, text=True, env=opgate_env, timeout=120)
    assert one.returncode == 2 and "exactly two builds" in one.stderr and "Traceback" not in one.stderr


def test_cli_compare_writes_html_and_history_through_the_one_output_layer(tmp_path, opgate_env):
    """--html and --history on `inspect --compare` (once accepted and ignored) write what they say, like every
    verb's: the same emit() call as --json."""
    html, history = tmp_path / "c.html", tmp_path / "runs.sqlite"
    # COLUMNS: a long temporary path (pytest-xdist's) must not be wrapped mid-name in the printed line
    run = subprocess.run([sys.executable, "-m", "opgate", "inspect", "--compare", str(NVCC_BUILD), str(CLANG_BUILD),
                          "--targets", "h200,a100", "--html", str(html), "--history", str(history)],
                         capture_output=True, text=True, env={**opgate_env, "COLUMNS": "400"}, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"HTML report: {html}" in run.stdout and 'id="verdict">PASSED<' in html.read_text()
    assert "run history: run 1 appended" in run.stdout
    runs = subprocess.run([sys.executable, "-m", "opgate", "history", str(history)], capture_output=True, text=True,
                          env=opgate_env, timeout=120)
    assert runs.returncode == 0 and "inspect" in runs.stdout, runs.stdout + runs.stderr


@pytest.fixture(scope="module")
def planted_nvcc_builds(nvcc, tmp_path_factory) -> Path:
    """Fresh nvcc builds with the fleet's sm_90 SASS left out: once with compute_80 PTX, once without any PTX."""
    out = tmp_path_factory.mktemp("planted")
    builds = {"no_sm90.o": ["-gencode", "arch=compute_80,code=[sm_80,compute_80]"],
              "sass_only_sm80.o": ["-gencode", "arch=compute_80,code=sm_80"]}
    procs = [subprocess.Popen([nvcc, "-O3", "-c", *args, "-o", str(out / name), str(TOOLCHAIN / "kernels.cu")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name, args in builds.items()]
    for proc in procs:
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, output
    return out


def test_missing_sm90_sass_with_ptx_is_a_jit_difference(planted_nvcc_builds):
    comparison = compare(planted_nvcc_builds / "no_sm90.o", CLANG_BUILD, "h200@580.65.06")
    differs = messages(comparison, DIFFERS)
    assert sum("no_sm90.o lacks SASS for sm_90 (kernels_clang.o has it)" in m for m in differs) == 6
    assert sum("on h200 no_sm90.o serves it only through PTX JIT" in m for m in differs) == 6
    assert not comparison.breaks


def test_missing_sm90_sass_without_ptx_breaks_the_h200(planted_nvcc_builds):
    comparison = compare(CLANG_BUILD, planted_nvcc_builds / "sass_only_sm80.o", "h200@580.65.06,a100@535.104.05")
    breaks = messages(comparison, BREAKS)
    assert len(breaks) == 6 and all("sass_only_sm80.o cannot run it on h200" in m for m in breaks)


def test_fresh_nvcc_build_matches_the_committed_one(nvcc, tmp_path):
    fresh = tmp_path / "kernels_nvcc.o"
    subprocess.run([nvcc, "-O3", "-c", "-gencode", "arch=compute_80,code=sm_80", "-gencode",
                    "arch=compute_90,code=[sm_90,compute_90]", "-o", str(fresh), str(TOOLCHAIN / "kernels.cu")],
                   check=True, capture_output=True, timeout=300)
    comparison = compare_builds("fresh", inspect_paths([fresh], kernels=True), "clang",
                                inspect_paths([CLANG_BUILD], kernels=True), parse_targets("h200,a100"))
    assert set(comparison.a.kernels) == KERNELS
    assert not comparison.breaks


def _clang() -> str | None:
    return os.environ.get("CLANG") or shutil.which("clang++-19") or shutil.which("clang++")


def _wheel_cuda13() -> Path | None:
    root = Path(sys.prefix).glob("lib/python3*/site-packages/nvidia/cu13")
    return next((p for p in root if (p / "include" / "cuda_runtime.h").is_file()), None)


def test_fresh_clang_build_compares_with_nvcc(tmp_path):
    """clang on this machine's CUDA: the wheel's CUDA 13 headers first, else a CUDA <= 12 tree given as
    OPGATE_CLANG_CUDA_PATH (tests/data/toolchain/build.sh assembles one from the cu12 wheels)."""
    clang = _clang()
    if clang is None:
        pytest.skip("clang not installed (apt-get install clang-19): only the committed clang build is compared")
    attempts = [p for p in (_wheel_cuda13(), os.environ.get("OPGATE_CLANG_CUDA_PATH")) if p]
    if not attempts:
        pytest.skip("no CUDA headers for clang (nvidia-cuda-nvcc/-runtime wheels or OPGATE_CLANG_CUDA_PATH)")
    errors = []
    out = tmp_path / "fresh_clang.o"
    for cuda in attempts:
        proc = subprocess.run([clang, f"--cuda-path={cuda}", "--cuda-gpu-arch=sm_80", "--cuda-gpu-arch=sm_90",
                               "--no-cuda-include-ptx=all", "--cuda-include-ptx=sm_90", "-Wno-unknown-cuda-version",
                               "-O3", "-c", "-o", str(out), str(TOOLCHAIN / "kernels.cu")],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode == 0:
            break
        errors.append(f"{cuda}: " + next((line for line in proc.stderr.splitlines() if "error" in line), proc.stderr))
    else:
        # clang 19 and CUDA 13's headers: "'texture_fetch_functions.h' file not found" (build.sh has the details)
        pytest.skip("clang cannot build against the CUDA headers here: " + " | ".join(errors)[:600])
    comparison = compare(NVCC_BUILD, out, "h200@580.65.06,a100@535.104.05")
    assert set(comparison.b.kernels) == KERNELS
    assert all(k.sass == ("sm_80", "sm_90") for k in comparison.b.kernels.values())
    assert not comparison.breaks


@pytest.mark.parametrize("build", ["nvcc", "clang"])
def test_launched_fatbin_is_the_inspected_objects_section(build):
    """two_builds_spec.py launches kernels_<build>.fatbin: byte for byte the .nv_fatbin of the compared object."""
    from elftools.elf.elffile import ELFFile

    with open(TOOLCHAIN / f"kernels_{build}.o", "rb") as handle:
        section = ELFFile(handle).get_section_by_name(".nv_fatbin").data()
    assert (TOOLCHAIN / f"kernels_{build}.fatbin").read_bytes() == section
    (report,) = inspect_paths([TOOLCHAIN / f"kernels_{build}.fatbin"], kernels=True)
    assert {k.name for k in report.kernels} == KERNELS


def test_two_builds_spec_declares_one_implementation_per_build():
    from opgate.core.spec import load_spec_file

    ops = {op.name: op for op in load_spec_file(TOOLCHAIN / "two_builds_spec.py")}
    assert set(ops) == {"row_sum", "transpose"}
    assert all(set(op.implementations) == {"nvcc", "clang"} for op in ops.values())


def test_a_ptx_only_build_is_compared_by_its_entry_names():
    """kernels.ptx (inspect fixtures): kernels known from PTX `.entry` names alone, demangled, JIT-only."""
    fixtures = REPO / "tests" / "data" / "inspect"
    comparison = compare(fixtures / "kernels.ptx", fixtures / "sm90a.o", "h100@580.65.06")
    ptx_side = comparison.a.kernels
    assert ptx_side and all(k.sass == () and k.ptx for k in ptx_side.values())
    assert "void opgate_fixture::scale<float>(float*, float const*, float, int)" in {
        k.demangled for k in ptx_side.values()}
    assert {k.verdicts[0].status for k in ptx_side.values()} == {"jit"}
