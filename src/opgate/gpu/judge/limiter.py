"""Why is this kernel slow? Nsight Compute's metrics turned into one named limiter with its figures.

Input: ncu's CSV, either `--page raw` (one row per launch, one column per metric, a units row under the
header) or `--page details` / `--metrics ...` (one row per launch x metric), or a saved `.ncu-rep` read through
`ncu --import REPORT --csv --page raw` (so a report taken on a GPU host is explained on a CPU machine).

What is read (metric names from the Nsight Compute Kernel Profiling Guide, metrics reference):
- warp-state statistics: `smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio`, each divided by
  `smsp__average_warp_latency_per_inst_issued.ratio` = the share of a warp's cycles between two issued
  instructions spent in that stall (ncu's own "this stall type represents N% of the ... cycles" figure);
- occupancy: achieved `sm__warps_active.avg.pct_of_peak_sustained_active`, theoretical
  `sm__maximum_warps_per_active_cycle_pct`, and the blocks per SM each resource allows
  (`launch__occupancy_limit_{registers,shared_mem,warps,blocks,barriers}`): the smallest is the limiter;
- memory: `dram__throughput` / `lts__throughput` (% of peak), `lts__t_sector_hit_rate.pct`, DRAM bytes,
  duration; shared-memory wavefronts per shared instruction (> 1 = bank conflicts);
- the per-SM spread of `sm__cycles_active` (max vs average) where ncu gives .max/.avg.

The diagnosis is pure: `diagnose(profile, ceilings)` takes parsed metrics and the ceilings (measured on this
card by `opgate doctor --level standard` where cached, else the datasheet) and returns a `Diagnosis`.
"""

from __future__ import annotations

import csv
import io
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from opgate.model.errors import InputError
from opgate.gpu.probes.ncu import (LAUNCH_METRICS, LIMITER_METRICS, METRICS, UNIT_SCALE, KernelCounters, NcuNotFound,
                                   find_ncu)

# -- thresholds (opgate's policy, not vendor figures) -------------------------------------------------------
# A stall reason "dominates" at this share of the warp cycles between issued instructions.
DOMINANT_STALL = 0.25
# Shared-memory accesses needing this many wavefronts per instruction on average are bank-conflicted
# (1.0 = conflict-free for 32-bit accesses; an n-way conflict replays n times).
BANK_CONFLICT_WAVEFRONTS = 2.0
# DRAM or L2 throughput at this % of peak: the kernel is bandwidth-bound there.
BANDWIDTH_BOUND_PCT = 60.0
# Theoretical occupancy at or below this % leaves too few warps to hide latency (16 of 64 warps on sm_90).
LOW_OCCUPANCY_PCT = 25.0
# Achieved below this fraction of theoretical occupancy: warps are missing (tail, imbalance, short blocks).
ACHIEVED_GAP = 0.7
# An SM busy this much longer than the average SM: the work is unevenly spread.
SM_SPREAD = 0.25

STALL_RATIO = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
STALL_PCT = "smsp__warps_issue_stalled_{}_per_warp_active.pct"
STALL_SAMPLES = "smsp__pcsamp_warps_issue_stalled_{}"
WARP_LATENCY = "smsp__average_warp_latency_per_inst_issued.ratio"
ACHIEVED = "sm__warps_active.avg.pct_of_peak_sustained_active"
THEORETICAL = "sm__maximum_warps_per_active_cycle_pct"
OCCUPANCY_LIMITS = {
    "registers": "launch__occupancy_limit_registers",
    "shared memory": "launch__occupancy_limit_shared_mem",
    "warps": "launch__occupancy_limit_warps",
    "blocks": "launch__occupancy_limit_blocks",
    "barriers": "launch__occupancy_limit_barriers",
}
REGISTERS = "launch__registers_per_thread"
BLOCK_SIZE = "launch__block_size"
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
L2_PCT = "lts__throughput.avg.pct_of_peak_sustained_elapsed"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
L2_HIT = "lts__t_sector_hit_rate.pct"
L1_HIT = "l1tex__t_sector_hit_rate.pct"
DURATION = "gpu__time_duration.sum"
DRAM_BYTES = "dram__bytes.sum"
DRAM_READ, DRAM_WRITE = "dram__bytes_read.sum", "dram__bytes_write.sum"
L2_BYTES = "lts__t_bytes.sum"
SHARED_WAVEFRONTS = ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                     "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum")
SHARED_INSTRUCTIONS = ("smsp__inst_executed_op_shared_ld.sum", "smsp__inst_executed_op_shared_st.sum")
SHARED_INSTRUCTIONS_SASS = ("smsp__sass_inst_executed_op_shared_ld.sum", "smsp__sass_inst_executed_op_shared_st.sum")
BANK_CONFLICTS = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                  "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum")
SM_CYCLES = "sm__cycles_active"
# FLOPs from the SASS thread-instruction counters, weighted as ncu's own roofline chart sections weight them
# (an FMA is two). Tensor-core work is not in these counters: a matmul's point sits low.
FLOP_COUNTERS = {
    "fp32": (("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", 1),
             ("smsp__sass_thread_inst_executed_op_fmul_pred_on.sum", 1),
             ("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", 2)),
    "fp64": (("smsp__sass_thread_inst_executed_op_dadd_pred_on.sum", 1),
             ("smsp__sass_thread_inst_executed_op_dmul_pred_on.sum", 1),
             ("smsp__sass_thread_inst_executed_op_dfma_pred_on.sum", 2)),
    "fp16": (("smsp__sass_thread_inst_executed_op_hadd_pred_on.sum", 1),
             ("smsp__sass_thread_inst_executed_op_hmul_pred_on.sum", 1),
             ("smsp__sass_thread_inst_executed_op_hfma_pred_on.sum", 2)),
}

# The details page names metrics as ncu's section files label them; mapped to the raw names read above.
DETAILS_NAMES = {
    "Achieved Occupancy": ACHIEVED,
    "Theoretical Occupancy": THEORETICAL,
    "Block Limit Registers": OCCUPANCY_LIMITS["registers"],
    "Block Limit Shared Mem": OCCUPANCY_LIMITS["shared memory"],
    "Block Limit Warps": OCCUPANCY_LIMITS["warps"],
    "Block Limit SM": OCCUPANCY_LIMITS["blocks"],
    "Block Limit Barriers": OCCUPANCY_LIMITS["barriers"],
    "Registers Per Thread": REGISTERS,
    "Block Size": BLOCK_SIZE,
    "DRAM Throughput": DRAM_PCT,
    "L2 Cache Throughput": L2_PCT,
    "Compute (SM) Throughput": SM_PCT,
    "L2 Hit Rate": L2_HIT,
    "L1/TEX Hit Rate": L1_HIT,
    "Duration": DURATION,
    "Warp Cycles Per Issued Instruction": WARP_LATENCY,
}


@dataclass
class KernelProfile:
    """One profiled launch: ncu's raw metric names -> values in base units (bytes, ns, %, counts)."""

    launch_id: int
    kernel: str
    block: str = ""
    grid: str = ""
    cc: str = ""
    device: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    attributes: dict[str, str] = field(default_factory=dict)  # non-numeric values, e.g. the device name

    @property
    def gpu_name(self) -> str | None:
        named = self.attributes.get("device__attribute_display_name")
        return named or (self.device if self.device and not self.device.isdigit() else None)

    def get(self, *names: str) -> float | None:
        return next((self.metrics[n] for n in names if n in self.metrics), None)

    def total(self, names: Sequence[str]) -> float | None:
        values = [self.metrics[n] for n in names if n in self.metrics]
        return sum(values) if values else None


def limiter_profile(kernel: KernelCounters) -> KernelProfile:
    """A launch counted by `opgate.gpu.probes.ncu.run_ncu`, as `diagnose` reads it (ncu's metric names)."""
    names = {**METRICS, **LAUNCH_METRICS, **LIMITER_METRICS}
    return KernelProfile(kernel.launch_id, kernel.kernel, kernel.block, kernel.grid, kernel.cc,
                         metrics={names[k]: v for k, v in kernel.values.items() if k in names})


# -- reading ------------------------------------------------------------------------------------------------

def _number(text: str) -> float | None:
    cleaned = (text or "").replace(",", "").strip()
    if not cleaned:
        return None
    try:
        return float(cleaned)
    except ValueError:
        return None


def _scale(unit: str) -> float:
    return UNIT_SCALE.get((unit or "").split("/")[0].strip(), 1)


def read_ncu_csv(text: str) -> list[KernelProfile]:
    """Kernel launches from ncu's CSV, raw or details layout; lines before the header (ncu's notes) skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    if "Metric Name" in header:
        return _read_long(header, rows[1:])
    return _read_wide(header, rows[1:])


def _profile_for(by_id: dict[int, KernelProfile], row: dict[str, str]) -> KernelProfile | None:
    launch = _number(row.get("ID", ""))
    if launch is None:
        return None
    return by_id.setdefault(int(launch), KernelProfile(
        int(launch), row.get("Kernel Name", ""), row.get("Block Size", ""), row.get("Grid Size", ""),
        row.get("CC", ""), row.get("Device", "")))


def _read_long(header: list[str], rows: list[list[str]]) -> list[KernelProfile]:
    by_id: dict[int, KernelProfile] = {}
    for values in rows:
        row = dict(zip(header, values))
        profile = _profile_for(by_id, row)
        value = _number(row.get("Metric Value", ""))
        name = row.get("Metric Name", "")
        if profile is not None and value is None and row.get("Metric Value"):
            profile.attributes.setdefault(name, row["Metric Value"])
        if profile is None or value is None:
            continue
        name = DETAILS_NAMES.get(name, name)
        unit = row.get("Metric Unit", "")
        if name == REGISTERS or name == BLOCK_SIZE or name.startswith("launch__occupancy_limit"):
            profile.metrics.setdefault(name, value)
        else:
            profile.metrics.setdefault(name, value * _scale(unit))
    return [by_id[k] for k in sorted(by_id)]


def _read_wide(header: list[str], rows: list[list[str]]) -> list[KernelProfile]:
    units: list[str] = [""] * len(header)
    if rows and _number(rows[0][0] if rows[0] else "") is None:  # the units row under the raw page's header
        units = rows[0] + [""] * (len(header) - len(rows[0]))
        rows = rows[1:]
    by_id: dict[int, KernelProfile] = {}
    for values in rows:
        row = dict(zip(header, values))
        profile = _profile_for(by_id, row)
        if profile is None:
            continue
        for index, name in enumerate(header):
            if "__" not in name or index >= len(values):
                continue
            value = _number(values[index])
            if value is not None:
                profile.metrics[name] = value * _scale(units[index])
            elif values[index].strip():
                profile.attributes[name] = values[index].strip()
    return [by_id[k] for k in sorted(by_id)]


def import_report(report: Path, timeout_s: float = 300.0) -> str:
    """`ncu --import REPORT --csv --page raw`: the CSV of a saved report (no GPU needed)."""
    try:
        ncu = find_ncu()
    except NcuNotFound as exc:
        raise InputError(f"{report}: reading a .ncu-rep needs Nsight Compute ({exc}); or pass the CSV that "
                         "`ncu --import REPORT --csv --page raw` writes") from None
    proc = subprocess.run([ncu, "--import", str(report), "--csv", "--page", "raw"], capture_output=True, text=True,
                          timeout=timeout_s)
    if proc.returncode != 0:
        raise InputError(f"{report}: ncu --import failed (exit {proc.returncode}): "
                         f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    return proc.stdout


def load_profiles(path: Path) -> list[KernelProfile]:
    """Launches of an ncu CSV file or `.ncu-rep` report; InputError when neither gives any."""
    path = Path(path)
    if not path.is_file():
        from opgate.model.errors import why_missing

        why = why_missing(path)
        problem = ("a directory" if path.is_dir() else "not a regular file" if path.exists()
                   else "no such file" if why == "does not exist" else why.removeprefix("is "))
        raise InputError(f"{path}: {problem}; pass an ncu CSV (--csv --page raw) or a .ncu-rep report")
    if path.suffix == ".ncu-rep":
        text = import_report(path)
    else:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    profiles = read_ncu_csv(text)
    if not profiles:
        raise InputError(f"{path}: no kernel launches in it (no ncu CSV header \"ID\",...); write it with "
                         "ncu --csv --page raw (or --page details), or pass the .ncu-rep")
    return profiles


# -- the facts the diagnosis uses ------------------------------------------------------------------------------

@dataclass(frozen=True)
class StallReason:
    reason: str
    label: str
    share: float  # fraction of warp cycles between issued instructions (0..1)
    cycles: float | None  # cycles per issued instruction spent in it (ratio metrics), None from samples
    meaning: str
    remedy: str


def stall_table() -> dict[str, dict[str, Any]]:
    from opgate.data import load_table

    return {row["reason"]: row for row in load_table("ncu_stall_reasons")}


def stall_reasons(profile: KernelProfile) -> list[StallReason]:
    """Every stall reason ncu measured for this launch, largest share first ('selected' left out)."""
    table = stall_table()
    found: dict[str, tuple[float, float | None]] = {}
    ratios = {r: profile.metrics[STALL_RATIO.format(r)] for r in table if STALL_RATIO.format(r) in profile.metrics}
    if ratios:
        total = profile.get(WARP_LATENCY) or sum(ratios.values())
        found = {r: (v / total, v) for r, v in ratios.items() if total > 0}
    else:
        pcts = {r: profile.metrics[STALL_PCT.format(r)] for r in table if STALL_PCT.format(r) in profile.metrics}
        if pcts:
            found = {r: (v / 100.0, None) for r, v in pcts.items()}
        else:
            samples = {r: profile.metrics[STALL_SAMPLES.format(r)] for r in table
                       if STALL_SAMPLES.format(r) in profile.metrics}
            total = sum(samples.values())
            found = {r: (v / total, None) for r, v in samples.items() if total > 0}
    out = [StallReason(r, table[r]["label"], share, cycles, table[r]["meaning"], table[r]["remedy"])
           for r, (share, cycles) in found.items() if r != "selected"]
    return sorted(out, key=lambda s: -s.share)


@dataclass(frozen=True)
class Occupancy:
    achieved_pct: float | None
    theoretical_pct: float | None
    limiter: str | None  # "registers", "shared memory", "warps", "blocks", "barriers"
    blocks_per_sm: float | None  # what the limiter allows
    registers_per_thread: float | None
    block_size: float | None

    def text(self) -> str:
        parts = []
        if self.theoretical_pct is not None:
            parts.append(f"occupancy {self.theoretical_pct:.0f}% theoretical")
        if self.achieved_pct is not None:
            parts.append(f"{self.achieved_pct:.0f}% achieved")
        text = ", ".join(parts) or "occupancy not measured"
        if self.limiter:
            text += f", limited by {self.limiter}"
            if self.limiter == "registers" and self.registers_per_thread:
                text += f" ({self.registers_per_thread:.0f}/thread)"
            if self.blocks_per_sm is not None:
                text += f" to {self.blocks_per_sm:.0f} block(s)/SM"
        return text


def occupancy_of(profile: KernelProfile) -> Occupancy:
    limits = {name: profile.metrics[metric] for name, metric in OCCUPANCY_LIMITS.items() if metric in profile.metrics}
    limiter = None
    if limits:
        # ties: name the resource a kernel author controls (registers, shared memory) before the hardware caps
        limiter = min(limits, key=lambda k: (limits[k], list(OCCUPANCY_LIMITS).index(k)))
        theoretical = profile.get(THEORETICAL)
        if theoretical is not None and theoretical >= 99.5:
            limiter = None  # nothing limits a full SM
    return Occupancy(profile.get(ACHIEVED), profile.get(THEORETICAL), limiter,
                     limits.get(limiter) if limiter else None, profile.get(REGISTERS), profile.get(BLOCK_SIZE))


@dataclass(frozen=True)
class Memory:
    dram_pct: float | None
    l2_pct: float | None
    l2_hit_pct: float | None
    l1_hit_pct: float | None
    dram_bytes: float | None
    l2_bytes: float | None
    duration_ns: float | None
    shared_wavefronts_per_instruction: float | None
    sm_busy_spread: float | None  # (max - avg) / avg of sm__cycles_active

    @property
    def dram_bytes_per_s(self) -> float | None:
        if self.dram_bytes is None or not self.duration_ns:
            return None
        return self.dram_bytes / (self.duration_ns * 1e-9)


def memory_of(profile: KernelProfile) -> Memory:
    dram = profile.get(DRAM_BYTES)
    if dram is None:
        dram = profile.total((DRAM_READ, DRAM_WRITE))
    instructions = profile.total(SHARED_INSTRUCTIONS) or profile.total(SHARED_INSTRUCTIONS_SASS)
    wavefronts = profile.total(SHARED_WAVEFRONTS)
    if wavefronts is None:
        wavefronts = profile.get("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum")  # loads and stores together
    per_instruction = None
    if instructions:
        if wavefronts is not None:
            per_instruction = wavefronts / instructions
        elif profile.total(BANK_CONFLICTS) is not None:
            per_instruction = 1.0 + profile.total(BANK_CONFLICTS) / instructions  # type: ignore[operator]
    busy_max, busy_avg = profile.get(f"{SM_CYCLES}.max"), profile.get(f"{SM_CYCLES}.avg")
    spread = (busy_max - busy_avg) / busy_avg if busy_max is not None and busy_avg else None
    return Memory(profile.get(DRAM_PCT), profile.get(L2_PCT), profile.get(L2_HIT), profile.get(L1_HIT), dram,
                  profile.get(L2_BYTES), profile.get(DURATION), per_instruction, spread)


# -- roofline ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ceilings:
    """Bandwidth and compute ceilings of the card, each with where it came from."""

    hbm_bytes_per_s: float | None = None
    hbm_source: str = ""
    l2_bytes_per_s: float | None = None
    l2_source: str = ""
    peak_flops: dict[str, float] = field(default_factory=dict)  # precision -> FLOP/s (datasheet)
    peak_source: str = ""


def ceilings_for(gpu_name: str | None) -> Ceilings:
    """The doctor's measured HBM and L2 read bandwidth cached for this GPU model where they exist, else the
    datasheet HBM figure; peaks from the GPU catalogue. `gpu_name` as CUDA names it ("NVIDIA H200")."""
    if not gpu_name:
        return Ceilings()
    from opgate.gpu.judge.ceilings import load_ceilings
    from opgate.core.gpus import lookup_gpu

    try:
        gpu = lookup_gpu(gpu_name)
    except InputError:
        gpu = None
    hbm, hbm_source = (gpu.bandwidth_bytes_per_s, f"{gpu.name} datasheet") if gpu else (None, "")
    l2, l2_source = None, ""
    measured = load_ceilings(gpu_name)
    if measured is not None:
        hbm, hbm_source = measured.hbm_read_bytes_per_s, f"HBM read measured on this card by {measured.source}"
        if measured.l2_read_bytes_per_s:
            l2, l2_source = measured.l2_read_bytes_per_s, f"L2 read measured on this card by {measured.l2_source}"
    peaks = {}
    if gpu is not None:
        for precision in ("fp32", "fp64", "fp16"):
            value = gpu.peak_ops_per_s(precision)
            if value:
                peaks[precision] = value
    return Ceilings(hbm, hbm_source, l2, l2_source, peaks, f"{gpu.name} catalogue" if gpu else "")


@dataclass(frozen=True)
class RooflinePoint:
    flops: float
    precision: str
    duration_s: float
    dram_bytes: float | None
    l2_bytes: float | None
    ceilings: Ceilings
    flops_counted: bool = True  # False: the profile has no FLOP counters (a bytes-only point)

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.duration_s

    def intensity(self, level: str) -> float | None:
        moved = self.dram_bytes if level == "hbm" else self.l2_bytes
        return self.flops / moved if moved else None

    def bound_time_s(self) -> tuple[float, str] | None:
        """The roofline floor of this launch and the ceiling that sets it."""
        floors = []
        peak = self.ceilings.peak_flops.get(self.precision)
        if peak and self.flops:
            floors.append((self.flops / peak, f"{self.precision} peak"))
        if self.dram_bytes and self.ceilings.hbm_bytes_per_s:  # bytes over the measured (or datasheet) HBM
            floors.append((self.dram_bytes / self.ceilings.hbm_bytes_per_s, "HBM"))
        if self.l2_bytes and self.ceilings.l2_bytes_per_s:
            floors.append((self.l2_bytes / self.ceilings.l2_bytes_per_s, "L2"))
        return max(floors) if floors else None


def roofline_of(profile: KernelProfile, memory: Memory, ceilings: Ceilings) -> RooflinePoint | None:
    if not memory.duration_ns:
        return None
    counted = {p: sum(profile.metrics.get(n, 0.0) * w for n, w in counters) for p, counters in FLOP_COUNTERS.items()
               if any(n in profile.metrics for n, _ in counters)}
    if not counted and not memory.dram_bytes and not memory.l2_bytes:
        return None
    precision = max(counted, key=lambda p: counted[p]) if counted else "fp32"
    counted.setdefault(precision, 0.0)
    return RooflinePoint(counted[precision], precision, memory.duration_ns * 1e-9, memory.dram_bytes,
                         memory.l2_bytes, ceilings, flops_counted=bool(counted[precision]))


# -- the diagnosis ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Diagnosis:
    kernel: str
    launch_id: int
    limiter: str  # barrier | bank-conflicts | dram-bandwidth | l2-bandwidth | occupancy | latency | ...
    line: str  # the one-line answer, with the figures
    remedy: str
    stalls: tuple[StallReason, ...]
    occupancy: Occupancy
    memory: Memory
    roofline: RooflinePoint | None
    figures: tuple[tuple[str, Any, str], ...]  # (name, value, unit)

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "launch_id": self.launch_id, "limiter": self.limiter, "line": self.line,
                "remedy": self.remedy,
                "stalls": [{"reason": s.reason, "share": round(s.share, 4), "cycles_per_issue": s.cycles}
                           for s in self.stalls],
                "figures": [{"name": n, "value": v, "unit": u} for n, v, u in self.figures]}


def _pct(x: float) -> str:
    return f"{x * 100:.0f}%"


def diagnose(profile: KernelProfile, ceilings: Ceilings | None = None) -> Diagnosis:
    """Name the limiter of one launch in one line, with the figures it rests on."""
    ceilings = ceilings or Ceilings()
    stalls = stall_reasons(profile)
    occupancy = occupancy_of(profile)
    memory = memory_of(profile)
    top = stalls[0] if stalls else None
    share = {s.reason: s.share for s in stalls}
    occ = occupancy.text()

    limiter, line, remedy = "unknown", "", ""
    conflicts = memory.shared_wavefronts_per_instruction
    shared_stall = share.get("short_scoreboard", 0.0) + share.get("mio_throttle", 0.0)
    if conflicts is not None and conflicts >= BANK_CONFLICT_WAVEFRONTS and shared_stall >= DOMINANT_STALL / 2:
        limiter = "bank-conflicts"
        line = (f"shared-memory bank conflicts: {conflicts:.1f} wavefronts per shared-memory instruction "
                f"(1.0 = conflict-free), {_pct(shared_stall)} of warp cycles stalled on shared memory "
                f"(short scoreboard + MIO throttle); {occ}")
        remedy = "pad the shared array (e.g. [32][33]) or swizzle the index so a warp's 32 accesses hit 32 banks"
    elif top is not None and top.reason == "barrier" and top.share >= DOMINANT_STALL:
        limiter = "barrier"
        line = f"{_pct(top.share)} of warp cycles stalled at a barrier: {top.meaning.split(': ')[-1]}; {occ}"
        remedy = top.remedy
    elif memory.dram_pct is not None and memory.dram_pct >= BANDWIDTH_BOUND_PCT:
        limiter = "dram-bandwidth"
        line = f"DRAM bandwidth-bound: DRAM throughput {memory.dram_pct:.0f}% of peak" + _bandwidth_text(memory, ceilings)
        remedy = "move fewer bytes: fuse with the neighbouring kernels, use a narrower dtype, reuse tiles from L2/shared memory"
    elif memory.l2_pct is not None and memory.l2_pct >= BANDWIDTH_BOUND_PCT:
        limiter = "l2-bandwidth"
        line = (f"L2 bandwidth-bound: L2 throughput {memory.l2_pct:.0f}% of peak, hit rate "
                f"{_fmt(memory.l2_hit_pct, '%')}; {occ}")
        remedy = "reuse data from shared memory or registers instead of re-reading it through L2"
    elif (occupancy.theoretical_pct is not None and occupancy.theoretical_pct <= LOW_OCCUPANCY_PCT
          and occupancy.limiter in ("registers", "shared memory", "barriers")):
        limiter = "occupancy"
        stall_text = f"; {_pct(top.share)} of warp cycles in {top.label} ({top.meaning.split(': ')[0]}) with too " \
                     "few warps to hide it" if top else ""
        line = f"{occ}{stall_text}"
        remedy = ("fewer registers per thread: __launch_bounds__(threads, minBlocks) or -maxrregcount, smaller "
                  "per-thread arrays" if occupancy.limiter == "registers"
                  else "less shared memory per block (smaller tiles) or more blocks per SM")
    elif top is not None and top.reason == "long_scoreboard" and top.share >= DOMINANT_STALL:
        limiter = "latency"
        line = (f"memory-latency-bound: {_pct(top.share)} of warp cycles waiting on global memory (long scoreboard) "
                f"while DRAM runs at {_fmt(memory.dram_pct, '%')} of peak and L2 at {_fmt(memory.l2_pct, '%')}: "
                f"dependent loads, not bandwidth (L2 hit rate {_fmt(memory.l2_hit_pct, '%')}); {occ}")
        remedy = top.remedy
    elif top is not None and top.share >= DOMINANT_STALL:
        limiter = top.reason.replace("_", "-")
        line = f"{_pct(top.share)} of warp cycles in {top.label}: {top.meaning}; {occ}"
        remedy = top.remedy
    elif top is not None:
        limiter = "issue"
        line = (f"no single stall dominates (largest: {top.label} {_pct(top.share)}); {occ}; "
                f"SM throughput {_fmt(profile.get(SM_PCT), '%')} of peak")
        remedy = "the kernel issues close to its instruction mix's rate: fewer instructions per result help most"
    else:
        line = f"no warp-state metrics in this profile (profile with --set full or --section WarpStateStats); {occ}"
    if (occupancy.achieved_pct is not None and occupancy.theoretical_pct
            and occupancy.achieved_pct < ACHIEVED_GAP * occupancy.theoretical_pct and limiter != "occupancy"):
        line += (f"; achieved occupancy is {occupancy.achieved_pct / occupancy.theoretical_pct:.0%} of theoretical "
                 f"({_grid_text(profile)})")
    if memory.sm_busy_spread is not None and memory.sm_busy_spread >= SM_SPREAD:
        line += f"; the busiest SM ran {memory.sm_busy_spread:.0%} longer than the average SM (uneven work)"
    roofline = roofline_of(profile, memory, ceilings)
    if remedy:
        line += f"; try: {remedy}"
    return Diagnosis(profile.kernel, profile.launch_id, limiter, line, remedy, tuple(stalls), occupancy, memory,
                     roofline, tuple(_figures(stalls, occupancy, memory, roofline)))


def _grid_text(profile: KernelProfile) -> str:
    """Why warps may be missing: the grid against the SMs, as far as the profile says."""
    waves = profile.get("launch__waves_per_multiprocessor")
    blocks = profile.get("launch__grid_size") or _block_count(profile.grid)
    sms = profile.get("device__attribute_multiprocessor_count")
    if blocks is not None and sms:
        text = f"{blocks:.0f} blocks for {sms:.0f} SMs"
        return text + (f", {waves:.2f} waves" if waves is not None else "")
    if waves is not None:
        return f"{waves:.2f} waves of blocks: a partial last wave leaves SMs idle"
    return f"grid {profile.grid}: few blocks, a tail wave or uneven blocks" if profile.grid else \
        "few blocks, a tail wave or uneven blocks"


def _block_count(grid: str) -> float | None:
    """(64, 1, 1) -> 64."""
    parts = [p.strip() for p in grid.strip("() ").split(",") if p.strip()]
    try:
        count = 1.0
        for part in parts:
            count *= float(part)
        return count if parts else None
    except ValueError:
        return None


def _fmt(value: float | None, unit: str) -> str:
    return "n/a" if value is None else f"{value:.0f}{unit}"


def _bandwidth_text(memory: Memory, ceilings: Ceilings) -> str:
    rate = memory.dram_bytes_per_s
    if rate is None:
        return ""
    text = f", {rate / 1e12:.2f} TB/s"
    if ceilings.hbm_bytes_per_s:
        text += f" = {rate / ceilings.hbm_bytes_per_s:.0%} of {ceilings.hbm_bytes_per_s / 1e12:.2f} TB/s ({ceilings.hbm_source})"
    return text


def _figures(stalls: Sequence[StallReason], occupancy: Occupancy, memory: Memory,
             roofline: RooflinePoint | None) -> list[tuple[str, Any, str]]:
    figures: list[tuple[str, Any, str]] = [(f"stall: {s.label}", round(s.share * 100, 1), "% of warp cycles")
                                           for s in stalls[:4]]
    figures += [
        ("theoretical occupancy", occupancy.theoretical_pct, "%"),
        ("achieved occupancy", occupancy.achieved_pct, "%"),
        ("occupancy limiter", occupancy.limiter or "none", ""),
        ("registers per thread", occupancy.registers_per_thread, ""),
        ("DRAM throughput", memory.dram_pct, "% of peak"),
        ("L2 throughput", memory.l2_pct, "% of peak"),
        ("L2 hit rate", memory.l2_hit_pct, "%"),
        ("shared wavefronts per instruction", None if memory.shared_wavefronts_per_instruction is None
         else round(memory.shared_wavefronts_per_instruction, 2), ""),
        ("duration", None if memory.duration_ns is None else round(memory.duration_ns / 1e3, 2), "us"),
    ]
    if memory.sm_busy_spread is not None:
        figures.append(("busiest SM vs average", round(memory.sm_busy_spread * 100, 1), "% longer"))
    if memory.dram_bytes is not None:
        figures.append(("DRAM bytes", round(memory.dram_bytes), "B"))
    if memory.dram_bytes_per_s is not None:
        figures.append(("DRAM bandwidth achieved", round(memory.dram_bytes_per_s / 1e12, 4), "TB/s"))
    if roofline is not None:
        if roofline.flops_counted:
            figures.append((f"achieved {roofline.precision}", round(roofline.flops_per_s / 1e9, 2), "GFLOP/s"))
            for level in ("hbm", "l2"):
                value = roofline.intensity(level)
                if value is not None:
                    figures.append((f"arithmetic intensity vs {level.upper()}", round(value, 3), "FLOP/byte"))
        floor = roofline.bound_time_s()
        if floor is not None:
            figures.append(("roofline floor", round(floor[0] * 1e6, 3), f"us ({floor[1]}-bound)"))
            figures.append(("achieved fraction of the roofline floor", round(floor[0] / roofline.duration_s, 3), ""))
        c = roofline.ceilings
        if c.hbm_bytes_per_s:
            figures.append(("HBM ceiling", round(c.hbm_bytes_per_s / 1e12, 3), f"TB/s ({c.hbm_source})"))
        if c.l2_bytes_per_s:
            figures.append(("L2 ceiling", round(c.l2_bytes_per_s / 1e12, 3), f"TB/s ({c.l2_source})"))
    return [f for f in figures if f[1] is not None]
