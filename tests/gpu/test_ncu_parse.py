"""Nsight Compute CSV parsing, on text in the layout ncu's --csv details page prints (CPU test)."""

from __future__ import annotations

from opgate.gpu.ncu import parse_ncu_csv

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
