"""Nsight Compute (ncu) counters for an implementation's kernels: DRAM bytes, achieved occupancy and L2 hit
rate, read with `--clock-control none` (the card's clocks are left as found) and `--csv`.

The parser reads ncu's CSV "details" page: one row per (kernel launch, metric) with the columns
"ID", "Kernel Name", "Block Size", "Grid Size", "Metric Name", "Metric Unit", "Metric Value" among others.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

# Metric names as ncu calls them (Nsight Compute metrics reference, https://docs.nvidia.com/nsight-compute/).
METRICS = {
    "dram_bytes": "dram__bytes.sum",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "l2_hit_rate_pct": "lts__t_sector_hit_rate.pct",
    "duration_ns": "gpu__time_duration.sum",
    "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
}
# Launch facts that feed opgate's own occupancy model, shown beside ncu's theoretical occupancy. Asked for
# separately: should this ncu not know one of them, the run is repeated with METRICS alone.
LAUNCH_METRICS = {
    "block_size": "launch__block_size",
    "registers_per_thread": "launch__registers_per_thread",
    "static_shared_bytes": "launch__shared_mem_per_block_static",
    "dynamic_shared_bytes": "launch__shared_mem_per_block_dynamic",
}
# What `opgate explain`'s diagnosis reads (opgate.gpu.judge.limiter), under ncu's own names; asked for first, dropped
# when this ncu rejects one of them.
LIMITER_STALLS = ("barrier", "long_scoreboard", "short_scoreboard", "mio_throttle", "lg_throttle",
                  "math_pipe_throttle", "tex_throttle", "wait", "not_selected", "selected", "membar",
                  "branch_resolving", "no_instruction", "dispatch_stall", "drain", "imc_miss", "sleeping", "misc")
LIMITER_METRICS = {name: name for name in (
    *(f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in LIMITER_STALLS),
    "smsp__average_warp_latency_per_inst_issued.ratio",
    "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "smsp__inst_executed_op_shared_ld.sum")}
# ncu prints each value in the unit it finds readable ("271,872" byte, "3,200" ns, "2.10" Mbyte, "1.5" us)
# unless asked for base units (--print-units base, which run_ncu does); either way everything is scaled to
# bytes and nanoseconds. Per-item units ("byte/block", "register/thread") scale by their first part. Older
# releases spell times "nsecond"/"usecond"/"msecond".
UNIT_SCALE = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1024, "MB": 1024**2, "GB": 1024**3,
              "ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9,
              "nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9, "%": 1, "": 1}


class NcuNotFound(Exception):
    pass


@dataclass
class KernelCounters:
    launch_id: int
    kernel: str
    block: str = ""
    grid: str = ""
    values: dict[str, float] = field(default_factory=dict)  # our names (METRICS keys) -> value in base units
    cc: str = ""  # compute capability as ncu prints it, e.g. "9.0"


def find_ncu() -> str:
    found = shutil.which("ncu")
    if found:
        return found
    for candidate in sorted(Path("/opt/nvidia").glob("nsight-compute/*/ncu")) + [Path("/usr/local/cuda/bin/ncu")]:
        if os.access(candidate, os.X_OK):
            return str(candidate)
    raise NcuNotFound("Nsight Compute (ncu) is not on PATH, in /opt/nvidia/nsight-compute or /usr/local/cuda/bin")


def _number(text: str) -> float | None:
    cleaned = text.replace(",", "").strip()
    try:
        return float(cleaned)
    except ValueError:
        return None


def parse_ncu_csv(text: str, metrics: dict[str, str] | None = None) -> list[KernelCounters]:
    """Kernel launches and their metrics from ncu's CSV output (lines before the header are ncu's own notes);
    `metrics` maps our names to ncu's (default: METRICS, LAUNCH_METRICS and LIMITER_METRICS)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    by_id: dict[int, KernelCounters] = {}
    names = {v: k for k, v in (metrics or {**METRICS, **LAUNCH_METRICS, **LIMITER_METRICS}).items()}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        launch = _number(row.get("ID", ""))
        metric = names.get(row.get("Metric Name", ""))
        if launch is None or metric is None:
            continue
        value = _number(row.get("Metric Value", ""))
        if value is None:
            continue
        counters = by_id.setdefault(int(launch), KernelCounters(int(launch), row.get("Kernel Name", ""),
                                                                row.get("Block Size", ""), row.get("Grid Size", ""),
                                                                cc=row.get("CC", "")))
        unit = row.get("Metric Unit", "").split("/")[0]
        counters.values[metric] = value * UNIT_SCALE.get(unit, 1)
    return [by_id[k] for k in sorted(by_id)]


MetricAttempts = Sequence[tuple[dict[str, str], list[str]]]
# First with the launch facts and base units; then exactly the command verified on the H200
# (2026-11-29), should this ncu reject a metric name or option of the first.
DEFAULT_ATTEMPTS: MetricAttempts = (({**METRICS, **LAUNCH_METRICS, **LIMITER_METRICS}, ["--print-units", "base"]),
                                    ({**METRICS, **LAUNCH_METRICS}, ["--print-units", "base"]), (METRICS, []))


def run_ncu(command: Sequence[str], timeout_s: float = 300.0, launch_count: int = 20,
            attempts: MetricAttempts = DEFAULT_ATTEMPTS) -> tuple[list[KernelCounters], str]:
    """Profile `command`'s launches between cudaProfilerStart and cudaProfilerStop (at most `launch_count`);
    `attempts` are (metrics, extra ncu options) tried in turn until one reads counters. Returns the counters
    and ncu's stderr tail (stdout too when no counters were read: it holds ncu's errors)."""
    ncu = find_ncu()
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[3])  # src/ (or site-packages/): where `opgate` is
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    started = time.monotonic()
    tail = ""
    for metrics, extra in attempts:
        left = timeout_s - (time.monotonic() - started)
        if left <= 1:
            break
        full = [ncu, "--clock-control", "none", "--csv", *extra, "--profile-from-start", "off",
                "--launch-count", str(launch_count), "--target-processes", "all",
                "--metrics", ",".join(metrics.values()), *command]
        proc = subprocess.run(full, capture_output=True, text=True, timeout=left, env=env)
        kernels = parse_ncu_csv(proc.stdout, metrics)
        if kernels:
            return kernels, proc.stderr[-2000:]
        tail = proc.stdout[-1500:] + proc.stderr[-1500:]
    return [], tail
