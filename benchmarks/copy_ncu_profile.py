"""cudaMemcpy D2D beside opgate's copy kernel under Nsight Compute: what does the faster one do differently?

Written when opgate's grid-stride copy kernel reached 97% of cudaMemcpy D2D on the H200 (issue 6 asks for >= 100%),
to see what cudaMemcpy does differently: launch shape (grid, block, registers), DRAM bytes, L2 sectors and global
load instruction counts (hence the bytes each thread moves per load) of each profiled kernel. On the H200
(2026-11-29) ncu listed no kernel for cudaMemcpy, although the spin test of copy_kernel_sweep.py shows it waits
for the SMs: a driver-internal kernel that ncu does not profile. It now profiles opgate's tile kernel (the one
that beats cudaMemcpy) beside the grid-stride one.

    PYTHONPATH=src python3 benchmarks/copy_ncu_profile.py [--gib 2] [--json out.json]

The parent runs ncu (`--clock-control none`, the card's clocks are left as found) on this same file with
`--child`; the child copies once untimed (warm-up) and then profiles one cudaMemcpy and one launch of each copy
kernel between cudaProfilerStart and cudaProfilerStop.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from opgate.gpu.probes.ncu import KernelCounters, NcuNotFound, run_ncu  # noqa: E402

# Nsight Compute metric names (https://docs.nvidia.com/nsight-compute/ProfilingGuide/): the basic set is the
# one opgate's ncu stage uses on the H200; the extended set adds instruction and L2 sector counts.
BASIC = {
    "duration_ns": "gpu__time_duration.sum",
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "block_size": "launch__block_size",
    "grid_size": "launch__grid_size",
    "registers": "launch__registers_per_thread",
    "shared_bytes": "launch__shared_mem_per_block_static",
}
EXTENDED = {
    **BASIC,
    "dram_pct_peak": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "global_ld_instructions": "smsp__sass_inst_executed_op_global_ld.sum",
    "global_st_instructions": "smsp__sass_inst_executed_op_global_st.sum",
    "l2_read_sectors": "lts__t_sectors_op_read.sum",
    "l2_write_sectors": "lts__t_sectors_op_write.sum",
    "instructions": "smsp__inst_executed.sum",
}


def child(gib: float) -> int:
    import cupy
    import numpy as np

    from opgate.gpu.probes import kernels

    half = int(gib * (1 << 30))
    half -= half % (2 << 20)
    buffer = cupy.empty(2 * half, dtype=cupy.uint8)
    buffer[:half] = 7
    src, dst = np.uint64(buffer.data.ptr), np.uint64(buffer.data.ptr + half)
    n_vec = np.uint64(half // 16)
    sm_count = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    runtime = cupy.cuda.runtime

    def memcpy() -> None:
        runtime.memcpyAsync(int(dst), int(src), half, runtime.memcpyDeviceToDevice, 0)

    copies = [memcpy]
    tile = next(c for c in kernels.COPY_CONFIGS if c.kind == "tile")
    grid_stride = next(c for c in kernels.COPY_CONFIGS if c.kind == "keep")
    for config in (tile, grid_stride):
        fn = kernels.kernel(config.kernel_name)
        grid = (config.grid(sm_count, int(n_vec)),)
        copies.append(lambda fn=fn, grid=grid, threads=config.threads: fn(grid, (threads,), (src, dst, n_vec)))
    for copy in copies:  # warm-up: module load, first-touch of the pages
        copy()
    cupy.cuda.Device().synchronize()
    runtime.profilerStart()
    for copy in copies:
        copy()
        cupy.cuda.Device().synchronize()
    runtime.profilerStop()
    print(f"copied {half} bytes each way, {len(copies)} copies profiled")
    return 0


def row(k: KernelCounters, half: int) -> dict[str, Any]:
    v = k.values
    out: dict[str, Any] = {"kernel": k.kernel[:60], "grid": k.grid, "block": k.block, **v}
    seconds = v.get("duration_ns", 0) * 1e-9
    if seconds > 0:
        out["tbs_read_plus_written"] = 2 * half / seconds / 1e12
    ld, threads = v.get("global_ld_instructions"), 32  # warp-level instructions, 32 threads each
    if ld:
        out["bytes_per_thread_per_load"] = half / (ld * threads)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.gib)
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--gib", str(args.gib)]
    attempts = ((EXTENDED, ["--print-units", "base"]), (BASIC, ["--print-units", "base"]))
    try:
        found, tail = run_ncu(command, timeout_s=240, launch_count=10, attempts=attempts)
    except NcuNotFound as exc:
        print(f"not measured: {exc}")
        return 1
    if not found:
        print(f"ncu read no counters:\n{tail}")
        return 1
    half = int(args.gib * (1 << 30))
    half -= half % (2 << 20)
    rows = [row(k, half) for k in found]
    print(f"{len(rows)} kernel launch(es) profiled (cudaMemcpy, queued first, is listed only if ncu sees a kernel "
          "for it)")
    keys = ["grid", "block", "registers", "duration_ns", "tbs_read_plus_written", "dram_read_bytes",
            "dram_write_bytes", "dram_pct_peak", "occupancy_pct", "l2_hit_pct", "l2_read_sectors",
            "l2_write_sectors", "global_ld_instructions", "bytes_per_thread_per_load", "instructions"]
    for r in rows:
        print(f"\n{r['kernel']}")
        for key in keys:
            if key in r:
                value = r[key]
                print(f"  {key:28s} {value:,.3f}" if isinstance(value, float) else f"  {key:28s} {value}")
    if args.json:
        args.json.write_text(json.dumps({"bytes_each_way": half, "launches": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
