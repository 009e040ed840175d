"""Re-check opgate's occupancy answers against the CUDA driver's, recorded on a real GPU by
scripts/occupancy_driver_cases.py (tests/data/analyze/h200_occupancy_cases.json), and check that script's
kernel generator offline with real ptxas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from opgate.core.limits import sm_limits
from opgate.core.occupancy import KernelLaunch, calculate
from opgate.analyze.portability import occupancy_static_shared
from opgate_testing import script_module

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "data" / "analyze" / "h200_occupancy_cases.json"
SCRIPT = ROOT / "scripts" / "occupancy_driver_cases.py"


def _script():
    return script_module(SCRIPT, "occupancy_driver_cases")


@pytest.fixture(scope="module")
def recorded() -> dict:
    if not CASES.is_file():
        pytest.skip(f"{CASES.relative_to(ROOT)} not recorded yet: run scripts/occupancy_driver_cases.py on a GPU host")
    return json.loads(CASES.read_text())


def test_recorded_driver_answers_match_opgate(recorded):
    device = recorded["device"]
    cc = tuple(int(x) for x in device["compute_capability"].split("."))
    limits = sm_limits(cc)
    kernels = {k["index"]: k for k in recorded["kernels"]}
    cases = recorded["cases"]
    assert len(cases) >= 500
    disagreements = []
    for case in cases:
        kernel = kernels[case["kernel"]]
        launch = KernelLaunch(
            threads_per_block=case["threads_per_block"],
            registers_per_thread=kernel["registers"],
            static_shared_bytes=kernel["static_shared"],
            dynamic_shared_bytes=case["dynamic_shared_bytes"],
            max_dynamic_shared_bytes=kernel["max_dynamic_shared"],
            carveout_percent=case["carveout_percent"],
        )
        driver = 0 if case["driver_blocks"] is None else case["driver_blocks"]
        mine = calculate(launch, limits).active_blocks_per_sm
        if mine != driver:
            disagreements.append((kernel["registers"], kernel["static_shared"], case, mine))
    assert not disagreements, f"{len(disagreements)} of {len(cases)} disagree, e.g. {disagreements[:3]}"


def test_recorded_device_limits_match_the_table(recorded):
    device = recorded["device"]
    limits = sm_limits(device["compute_capability"])
    assert device["max_threads_per_sm"] == limits.max_threads_per_sm
    assert device["max_blocks_per_sm"] == limits.max_blocks_per_sm
    assert device["regs_per_sm"] == limits.regs_per_sm
    assert device["smem_per_sm"] == limits.smem_per_sm
    assert device["smem_per_block_optin"] == limits.smem_per_block_optin
    assert device["reserved_smem_per_block"] == limits.reserved_smem_per_block


def test_recorded_cubin_sections_map_to_the_drivers_static_shared(recorded):
    arch = int(recorded["device"]["compute_capability"].replace(".", ""))
    limits = sm_limits(recorded["device"]["compute_capability"])
    checked = [k for k in recorded["kernels"] if k["cubin_shared_section"] is not None]
    if not checked:
        pytest.skip("the recording has no JIT-linked cubins (cuLink path unavailable on that host)")
    for kernel in checked:
        assert occupancy_static_shared(kernel["cubin_shared_section"], arch, limits) == kernel["static_shared"], kernel


# -- offline: the generated kernels really have the register counts the script asks for ------------------------

def _nvidia_tool(name: str) -> str | None:
    try:
        from triton import knobs

        path = getattr(knobs.nvidia, name).path
        return path if path and Path(path).is_file() else None
    except Exception:
        return None


@pytest.mark.parametrize("registers, static_shared", [(24, 0), (40, 0), (96, 0), (168, 0), (255, 0), (64, 4096)])
def test_generated_ptx_gets_the_requested_registers(tmp_path, registers, static_shared):
    ptxas = _nvidia_tool("ptxas")
    if ptxas is None:
        pytest.skip("no ptxas (Triton's bundled one) to assemble the generated PTX")
    script = _script()
    name = f"k{registers}"
    (tmp_path / "k.ptx").write_text(script.kernel_ptx(name, registers, static_shared))
    for arch, reserved in (("sm_80", 0), ("sm_90", 1024)):
        cubin = tmp_path / f"k_{arch}.cubin"
        subprocess.run([ptxas, f"-arch={arch}", "-o", str(cubin), str(tmp_path / "k.ptx")], check=True,
                       capture_output=True, timeout=120)
        from opgate.analyze.resources import read_kernel_resources

        resources = read_kernel_resources(cubin.read_bytes(), name)
        assert resources is not None
        assert resources.registers == registers
        section = script.cubin_shared_section(cubin.read_bytes(), name)
        # ptxas puts the reserved 1 KB into the kernel's shared section from sm_90 on (when it uses any)
        assert section == (static_shared + reserved if static_shared else 0)


def test_script_without_a_gpu_exits_2_with_a_reason(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "cases.json")], capture_output=True,
                          text=True, timeout=120, env=env)
    if done.returncode == 0:
        pytest.skip("a GPU is present: the script ran for real")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no usable CUDA device/driver" in done.stderr
    assert not (tmp_path / "cases.json").exists()


def test_script_draws_enough_cases_and_a_register_spread():
    import random

    script = _script()
    plan = script.register_plan(random.Random(1))
    counts = {r for r, _ in plan}
    assert min(counts) <= 16 and max(counts) == 255 and len(counts) >= 40
    assert any(s for _, s in plan)


# -- the whole script, offline: NVIDIA's cuda_occupancy.h stands in for the driver ----------------------------

def _header() -> Path | None:
    for path in sorted((Path(sys.prefix) / "lib").glob("python3*/site-packages/nvidia/*/include/cuda_occupancy.h")) + [
        Path("/usr/local/cuda/include/cuda_occupancy.h")]:
        if path.is_file():
            return path
    return None


def test_script_end_to_end_with_the_header_as_driver(tmp_path, monkeypatch, capsys):
    """Runs main() with a stand-in Device: kernels assembled by ptxas (registers read back from the cubin) and
    occupancy answered by NVIDIA's cuda_occupancy.h compiled with g++. Exercises everything the H200 run does
    except the driver calls; the output goes to tmp_path, never to tests/data (these are not driver answers)."""
    import shutil

    header, ptxas = _header(), _nvidia_tool("ptxas")
    if header is None or ptxas is None or shutil.which("g++") is None:
        pytest.skip("needs cuda_occupancy.h, g++ and ptxas")
    oracle = tmp_path / "oracle"
    subprocess.run(["g++", "-O1", f"-I{header.parent}", "-o", str(oracle),
                    str(ROOT / "tests/data/analyze/cuda_occupancy_oracle.cpp")], check=True, timeout=120)
    script = _script()
    limits = sm_limits("9.0")
    from opgate.analyze.resources import read_kernel_resources

    class HeaderDevice:
        """Device attributes from the table (H100/H200 values), answers from NVIDIA's header."""

        def __init__(self, ordinal: int) -> None:
            self.name = "offline stand-in: cuda_occupancy.h"
            self.driver_version = 0
            self.attributes = {
                "compute_capability_major": 9, "compute_capability_minor": 0, "max_threads_per_block": 1024,
                "max_threads_per_sm": 2048, "max_blocks_per_sm": 32, "regs_per_block": 65536,
                "regs_per_sm": 65536, "warp_size": 32, "smem_per_block": 49152, "smem_per_sm": 233472,
                "smem_per_block_optin": 232448, "reserved_smem_per_block": 1024, "sm_count": 132,
            }
            self.cc = (9, 0)

        def build(self, index: int, registers: int, static_shared: int):
            name = f"occ_r{registers}_s{static_shared}"
            (tmp_path / f"{name}.ptx").write_text(script.kernel_ptx(name, registers, static_shared))
            cubin_path = tmp_path / f"{name}.cubin"
            subprocess.run([ptxas, "-arch=sm_90", "-o", str(cubin_path), str(tmp_path / f"{name}.ptx")],
                           check=True, capture_output=True, timeout=120)
            cubin = cubin_path.read_bytes()
            resources = read_kernel_resources(cubin, name)
            section = script.cubin_shared_section(cubin, name)
            static = occupancy_static_shared(section, 90, limits)
            return script.BuiltKernel(index, name, registers, resources.registers, static, section, 1024,
                                      232448 - static)

        def max_active_blocks(self, kernel, block_size: int, dynamic_shared: int, carveout):
            line = (f"9 0 1024 2048 65536 65536 32 49152 233472 232448 1024 {block_size} {kernel.registers} "
                    f"{kernel.static_shared} {dynamic_shared} {kernel.max_dynamic_shared} "
                    f"{-1 if carveout is None else carveout} 1\n")
            out = subprocess.run([str(oracle)], input=line, capture_output=True, text=True, timeout=30).stdout
            return int(out.split()[1])

        def close(self) -> None:
            pass

    monkeypatch.setattr(script, "Device", HeaderDevice)
    monkeypatch.setattr(script, "register_plan",
                        lambda rng: [(24, 0), (32, 0), (40, 0), (65, 0), (96, 0), (168, 0), (255, 0), (64, 16384)])
    out = tmp_path / "cases.json"
    code = script.main(["--out", str(out), "--cases", "500", "--carveout-cases", "60"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert printed.strip().splitlines()[-1] == "RESULT: all cases agree"
    document = json.loads(out.read_text())
    assert document["summary"]["default_carveout"] == "500/500 agree"
    assert document["summary"]["explicit_carveout"] == "60/60 agree"
    assert document["summary"]["cubin_section_checks"] == 8
    assert {k["registers"] for k in document["kernels"]} == {24, 32, 40, 65, 96, 168, 255, 64}
