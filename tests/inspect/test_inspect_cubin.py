"""Cubin reader: architecture from both e_flags layouts, kernels, resources, and damaged cubins."""

from __future__ import annotations

import struct

import pytest

from inspect_helpers import FIXTURES
from opgate.inspect.cubin import CubinError, cubin_arch, read_cubin, read_cubin_kernels, sm_from_flags
from opgate.inspect.fatbin import entry_payload
from opgate.inspect.sources import inspect_paths

SM89 = (FIXTURES / "sm89.cubin").read_bytes()
TRITON_CUBIN = next((FIXTURES / "triton_cache").rglob("add_kernel.cubin"))


def test_abi_v2_layout_from_nvcc_13():
    assert SM89[7] == 0x41 and SM89[8] == 8  # ELFOSABI 0x41, ABI version 8
    assert cubin_arch(SM89) == (89, "")
    assert read_cubin(SM89).abi_version == 8


def test_abi_v1_layout_from_ptxas_12():
    data = (FIXTURES / "sm90a_abi7.cubin").read_bytes()
    assert data[7] == 0x33 and data[8] == 7  # ELFOSABI 0x33, ABI version 7
    e_flags = struct.unpack_from("<I", data, 48)[0]
    assert e_flags & 0xFF == 90 and e_flags & 0x800  # SM in the low byte, 0x800 = `a`
    assert cubin_arch(data) == (90, "a")


def test_the_two_layouts_disagree_on_the_same_bytes():
    """Why the ABI version must pick the layout: 0x06005a04 is sm_90 in ABI 8 but sm_4 in ABI 7."""
    assert sm_from_flags(8, 0x06005A04) == 90
    assert sm_from_flags(7, 0x06005A04) == 4
    assert sm_from_flags(7, 0x005A0D5A) == 90


def test_arch_specific_and_family_suffixes_of_abi_v2_cubins():
    sm90a = inspect_paths([FIXTURES / "sm90a.o"])[0]
    cubin = entry_payload((FIXTURES / "sm90a.o").read_bytes(), sm90a.entries[0])
    assert cubin_arch(cubin) == (90, "a")  # from .nv.compat: e_flags equal plain sm_90's
    assert cubin_arch((FIXTURES / "sm100f.cubin").read_bytes()) == (100, "f")  # from the tool-info note


def test_kernels_demangled_with_resources():
    kernels = {k.name: k for k in read_cubin_kernels(SM89)}
    assert set(kernels) == {"_ZN14opgate_fixture5scaleIfEEvPT_PKS1_S1_i", "_ZN14opgate_fixture5scaleIdEEvPT_PKS1_S1_i",
                            "_Z13local_scratchPKiPfi", "tile_sum"}
    scale = kernels["_ZN14opgate_fixture5scaleIfEEvPT_PKS1_S1_i"]
    assert scale.demangled == "void opgate_fixture::scale<float>(float*, float const*, float, int)"
    assert scale.param_bytes == 8 + 8 + 4 + 4
    tile = kernels["tile_sum"]
    assert tile.static_shared_bytes == 256 * 4  # __shared__ float tile[256]
    assert tile.max_threads == 256  # __launch_bounds__(256)
    assert kernels["_Z13local_scratchPKiPfi"].stack_frame_bytes == 32 * 4  # float scratch[32]
    assert all(k.registers and k.registers > 0 for k in kernels.values())
    assert all(k.sm == 89 for k in kernels.values())


def test_triton_cubin_for_the_analyze_helper():
    data = TRITON_CUBIN.read_bytes()
    assert cubin_arch(data) == (90, "a")  # Triton compiles sm_90 as sm_90a
    (kernel,) = read_cubin_kernels(data)
    assert kernel.name == "add_kernel"
    assert kernel.max_threads == 4 * 32  # num_warps = 4


@pytest.mark.parametrize("data,message", [
    (b"", "not an ELF"),
    (b"\x7fELF" + b"\x01" * 60, "64-bit"),
    (SM89[:18] + struct.pack("<H", 62) + SM89[20:], "not EM_CUDA"),
    (SM89[:48] + b"\0\0\0\0" + SM89[52:], "no SM architecture"),
    (SM89[:64], "section headers unreadable"),
])
def test_not_a_cubin_raises_cubin_error(data, message):
    with pytest.raises(CubinError, match=message):
        read_cubin(data)


@pytest.mark.parametrize("cut", [100, 1000, 4000, len(SM89) - 200])
def test_truncated_cubin_gives_cubin_error_or_errors(cut):
    try:
        info = read_cubin(SM89[:cut])
    except CubinError as exc:
        assert "\n" not in str(exc)
    else:
        assert info.errors or len(info.kernels) <= 4
