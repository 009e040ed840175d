"""The GPU catalogue and the per-CC SM limits table: complete, sourced, and consistent with themselves."""

from __future__ import annotations

import pytest

from opgate.core.limits import known_ccs, sm_limits
from opgate.data import load_table
from opgate.core.gpus import PRECISIONS, all_gpus, lookup_gpu

REQUIRED = ("v100", "t4", "a10", "a100-40gb", "a100", "a30", "l4", "l40s", "h100", "h100-pcie", "h200", "b200",
            "rtx4090", "rtx5090")
FIELDS = ("sm_count", "memory_gb", "memory_bandwidth_gbs", "l2_mb", "boost_clock_mhz", "dense_tflops",
          "pcie_gen", "pcie_lanes", "nvlink_gbs", "source")


@pytest.mark.parametrize("key", REQUIRED)
def test_required_gpus_have_every_figure_and_a_public_source(key):
    gpu = lookup_gpu(key)
    for field in FIELDS:
        assert field in gpu.row, f"{key}: {field}"
    assert "http" in gpu.source
    assert set(gpu.precisions) <= set(PRECISIONS)
    assert gpu.peak_tflops("fp32") is not None
    for field in gpu.uncertain_fields:
        head = field.split(".")[0]
        assert head in gpu.row, f"{key}: uncertain field {field} does not exist"
    assert gpu.uncertain == bool(gpu.uncertain_fields)


@pytest.mark.parametrize("gpu", all_gpus(), ids=lambda g: g.key)
def test_fp32_peak_matches_sm_count_lanes_and_clock(gpu):
    # FP32 peak = SMs x FP32 lanes x 2 (FMA) x boost clock; a typo in any of the four breaks this.
    lanes = sm_limits(gpu.compute_capability).fp32_lanes_per_sm
    derived = gpu.sm_count * lanes * 2 * gpu.boost_clock_mhz * 1e6 / 1e12
    assert derived == pytest.approx(gpu.peak_tflops("fp32"), rel=0.03)


@pytest.mark.parametrize("gpu", all_gpus(), ids=lambda g: g.key)
def test_dense_tensor_peaks_are_ordered(gpu):
    fp16 = gpu.peak_tflops("fp16")
    assert fp16 is not None
    for narrower in ("fp8", "int8"):
        value = gpu.peak_tflops(narrower)
        if value is not None:
            assert value >= fp16
    tf32 = gpu.peak_tflops("tf32")
    if tf32 is not None:
        assert tf32 <= fp16
    bf16 = gpu.peak_tflops("bf16")
    if bf16 is not None:
        assert bf16 == fp16


def test_lookup_keeps_its_contract():
    gpu = lookup_gpu("NVIDIA H200")
    assert gpu.compute_capability == (9, 0)
    assert gpu.sm == 90
    assert lookup_gpu("rtx-5090").sm == 120
    assert lookup_gpu("h200").bandwidth_bytes_per_s == 4.8e12


def test_a_gpu_is_found_by_the_name_its_driver_reports():
    """torch.cuda.get_device_name / NVML say "NVIDIA H100 80GB HBM3" for the H100 SXM5: the runtime stage's roofline
    looks the GPU up by that name, and every device name of the probe table whose key is catalogued resolves."""
    assert lookup_gpu("NVIDIA H100 80GB HBM3").key == "h100"
    assert lookup_gpu("NVIDIA A100-SXM4-80GB").key == "a100"
    catalogued = {gpu.key for gpu in all_gpus()}
    for row in load_table("gpu_probe_thresholds"):
        if row["key"] in catalogued:
            for name in row["device_names"]:
                assert lookup_gpu(name).key == row["key"], name
    with pytest.raises(Exception, match="not in opgate's catalogue"):
        lookup_gpu("NVIDIA H100 NVL")  # in the probe table, not (yet) in the catalogue


def test_every_catalogued_gpu_has_sm_limits():
    for gpu in all_gpus():
        assert gpu.compute_capability in known_ccs()


@pytest.mark.parametrize("cc", known_ccs(), ids=lambda c: f"{c[0]}.{c[1]}")
def test_sm_limits_rows_are_consistent(cc):
    limits = sm_limits(cc)
    assert limits.max_warps_per_sm * limits.warp_size == limits.max_threads_per_sm
    assert limits.smem_carveouts_kb == tuple(sorted(limits.smem_carveouts_kb))
    assert limits.carveouts_bytes[-1] == limits.smem_per_sm  # the largest carve-out is the SM's capacity
    # Per-block opt-in maximum = SM capacity minus the 1 KB the driver reserves per block (CC >= 8.0).
    assert limits.smem_per_block_optin + limits.reserved_smem_per_block == limits.smem_per_sm
    assert limits.reserved_smem_per_block == (1024 if cc >= (8, 0) else 0)
    assert limits.smem_alloc_unit == (128 if cc >= (8, 0) else 256)
    assert limits.regs_per_sm == 65536 and limits.reg_alloc_unit == 256 and limits.sub_partitions == 4
    assert limits.barrier_multiplier in (1, 2)
    assert limits.source


def test_sm_limits_match_the_programming_guide_table():
    # cuda-facts.md §2b: (blocks/SM, warps/SM, smem/SM KB, smem/block opt-in KB)
    expected = {
        (7, 0): (32, 64, 96, 96), (7, 5): (16, 32, 64, 64), (8, 0): (32, 64, 164, 163), (8, 6): (16, 48, 100, 99),
        (8, 7): (16, 48, 164, 163), (8, 9): (24, 48, 100, 99), (9, 0): (32, 64, 228, 227),
        (10, 0): (32, 64, 228, 227), (10, 3): (32, 64, 228, 227), (11, 0): (24, 48, 228, 227),
        (12, 0): (24, 48, 100, 99), (12, 1): (24, 48, 100, 99),
    }
    assert set(expected) == set(known_ccs())
    for cc, (blocks, warps, smem_kb, optin_kb) in expected.items():
        limits = sm_limits(cc)
        assert (limits.max_blocks_per_sm, limits.max_warps_per_sm, limits.smem_per_sm // 1024,
                limits.smem_per_block_optin // 1024) == (blocks, warps, smem_kb, optin_kb)


def test_tables_load_with_sources():
    for name in ("gpus", "sm_limits"):
        for row in load_table(name):
            assert row["source"]
