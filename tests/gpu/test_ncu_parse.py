"""Nsight Compute CSV parsing, on text in the layout ncu's --csv details page prints (CPU test)."""

from __future__ import annotations

from pathlib import Path

from opgate.gpu.probes.ncu import parse_ncu_csv

SAMPLE = '''==PROF== Connected to process 4242 (/usr/bin/python3)
==PROF== Profiling "gelu_kernel" - 0: 0%....50%....100% - 1 pass
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3","127.0.0.1","gelu_kernel","1","7","(128, 1, 1)","(2049, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes.sum","Mbyte","2.10"
"0","4242","python3","127.0.0.1","gelu_kernel","1","7","(128, 1, 1)","(2049, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","3.58"
"0","4242","python3","127.0.0.1","gelu_kernel","1","7","(128, 1, 1)","(2049, 1, 1)","0","9.0","Command line profiler metrics","lts__t_sector_hit_rate.pct","%","12.5"
"0","4242","python3","127.0.0.1","gelu_kernel","1","7","(128, 1, 1)","(2049, 1, 1)","0","9.0","Command line profiler metrics","sm__warps_active.avg.pct_of_peak_sustained_active","%","71.3"
"1","4242","python3","127.0.0.1","other_kernel","1","7","(256, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes.sum","byte","1,024"
'''


def test_parse_ncu_csv() -> None:
    kernels = parse_ncu_csv(SAMPLE)
    assert [k.kernel for k in kernels] == ["gelu_kernel", "other_kernel"]
    gelu = kernels[0].values
    assert gelu["dram_bytes"] == 2.10e6
    assert gelu["duration_ns"] == 3580.0
    assert gelu["l2_hit_rate_pct"] == 12.5 and gelu["achieved_occupancy_pct"] == 71.3
    assert kernels[1].values["dram_bytes"] == 1024.0
    assert kernels[0].block == "(128, 1, 1)"


def test_no_header_means_no_counters() -> None:
    assert parse_ncu_csv("==PROF== ERROR: profiling is not supported on this device\n") == []


def test_parse_real_h200_output() -> None:
    """ncu 2025.3.1 on the H200, profiling the gelu example's Triton kernel (recorded 2026-11-29)."""
    text = (Path(__file__).parents[1] / "data" / "ncu" / "gelu_triton_h200.csv").read_text()
    [gelu] = parse_ncu_csv(text)
    assert gelu.kernel == "_gelu_kernel" and gelu.grid == "(64, 1, 1)" and gelu.block == "(128, 1, 1)"
    assert gelu.values["dram_bytes"] == 271_872.0  # "271,872" byte: thousands separator removed
    assert gelu.values["duration_ns"] == 3_200.0  # "3,200" ns
    assert gelu.values["theoretical_occupancy_pct"] == 100.0
    assert 0 < gelu.values["achieved_occupancy_pct"] < 100 and 0 < gelu.values["l2_hit_rate_pct"] < 100


def test_units_scale_to_bytes_and_nanoseconds() -> None:
    header = '"ID","Kernel Name","Block Size","Grid Size","Metric Name","Metric Unit","Metric Value"\n'
    rows = ['"0","k","(1, 1, 1)","(1, 1, 1)","gpu__time_duration.sum","us","1.5"',
            '"0","k","(1, 1, 1)","(1, 1, 1)","dram__bytes.sum","Kbyte","2"']
    [k] = parse_ncu_csv(header + "\n".join(rows))
    assert k.values["duration_ns"] == 1500.0 and k.values["dram_bytes"] == 2000.0


# Written in the layout of the H200 capture above, with launch metrics in base units (--print-units base).
LAUNCH_CSV = '''"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","7","python3","127.0.0.1","k","1","7","(256, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","launch__block_size","","256"
"0","7","python3","127.0.0.1","k","1","7","(256, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","launch__registers_per_thread","register/thread","128"
"0","7","python3","127.0.0.1","k","1","7","(256, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","launch__shared_mem_per_block_static","byte/block","16,384"
"0","7","python3","127.0.0.1","k","1","7","(256, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","launch__shared_mem_per_block_dynamic","byte/block","0"
"0","7","python3","127.0.0.1","k","1","7","(256, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","sm__maximum_warps_per_active_cycle_pct","%","25"
'''


def test_launch_facts_feed_opgates_occupancy_model() -> None:
    from opgate.verify.runtime import model_occupancy_pct

    [k] = parse_ncu_csv(LAUNCH_CSV)
    assert k.cc == "9.0"
    assert k.values["registers_per_thread"] == 128 and k.values["static_shared_bytes"] == 16384
    # 128 registers x 256 threads = 32768 per block: 2 blocks of 8 warps on a 64-warp sm_90 SM = 25%.
    assert model_occupancy_pct(k) == 25.0 == k.values["theoretical_occupancy_pct"]


def test_no_launch_facts_no_model_figure() -> None:
    from opgate.verify.runtime import model_occupancy_pct

    text = (Path(__file__).parents[1] / "data" / "ncu" / "gelu_triton_h200.csv").read_text()
    [gelu] = parse_ncu_csv(text)
    assert model_occupancy_pct(gelu) is None


def test_caller_names_its_own_metrics() -> None:
    """Benchmarks ask ncu for other metrics (benchmarks/copy_ncu_profile.py): only those are read, by the caller's names."""
    kernels = parse_ncu_csv(SAMPLE, {"time": "gpu__time_duration.sum", "hit": "lts__t_sector_hit_rate.pct"})
    assert [k.kernel for k in kernels] == ["gelu_kernel"]  # other_kernel has neither metric
    assert kernels[0].values == {"time": 3580.0, "hit": 12.5}
