"""Pure judgement of a collectives sweep: the link reference from the NVML snapshot and data/nvlink_bandwidth.toml,
busbw at the largest size against the topology's band, small-message latency, the straggler, correctness.
No GPU, no processes: recorded runs and snapshots (tests/data/multigpu/) test all of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from opgate.data import load_table
from opgate.gpu.probes.collectives import OPS, LATENCY_MAX_BYTES, CollectiveRun
from opgate.gpu.judge.bands import band_threshold, judge
from opgate.gpu.judge.references import Band, gpu_key_for
from opgate.probes.nvlink import LinkSnapshot
from opgate.model.results import Figure, Outcome, slug, worst_outcome

# Below this the sweep never left the latency regime: busbw there says nothing about the links.
MIN_JUDGED_BYTES = 256 << 20
TABLE = "nvlink_bandwidth"


@dataclass(frozen=True)
class NvlinkModel:
    gpu: str
    generation: int
    links: int
    per_link_gbs_per_direction: float
    source: str


def nvlink_model(gpu_key: str | None) -> NvlinkModel | None:
    for row in load_table(TABLE):
        if row["kind"] == "gpu" and row["gpu"] == gpu_key:
            return NvlinkModel(str(row["gpu"]), int(row["nvlink_generation"]), int(row["links"]),
                               float(row["per_link_gbs_per_direction"]), str(row["source"]))
    return None


def collective_band(metric: str, topology: str) -> Band:
    """The band of `metric` for `topology`, else its "any" row; KeyError (an opgate bug) when neither exists."""
    fallback = None
    for row in load_table(TABLE):
        if row["kind"] != "band" or row["metric"] != metric:
            continue
        band = Band(metric, str(row["topology"]), str(row["comparison"]), float(row["pass_at"]),
                    float(row["warn_at"]), str(row.get("unit", "")), str(row["source"]),
                    bool(row.get("uncertain", False)))
        if row["topology"] == topology:
            return band
        if row["topology"] == "any":
            fallback = band
    if fallback is None:
        raise KeyError(f"data/{TABLE}.toml has no band {metric!r} for {topology!r}")
    return fallback


@dataclass(frozen=True)
class LinkReference:
    """What busbw is compared with: per-direction GB/s of the GPUs' links, and how it was found."""

    topology: str  # "nvlink" | "pcie"
    per_direction_gbs: float | None
    basis: str
    source: str
    findings: tuple[str, ...] = ()  # NVLinks down, a GPU on a narrower PCIe link


def _nv_count(cell: str) -> int:
    try:
        return int(cell[2:]) if cell.startswith("NV") else 0
    except ValueError:
        return 0


def link_reference(snapshot: LinkSnapshot) -> LinkReference:
    from opgate.gpu.probes.pcie import UnknownPcieGeneration, pcie_theoretical_gbs

    findings: list[str] = []
    if snapshot.all_pairs_nvlink():
        per_gpu_links = []
        for gpu in snapshot.gpus:
            matrix_links = sum(_nv_count(c) for j, c in enumerate(snapshot.links[gpu.index]) if j != gpu.index)
            # through an NVSwitch the matrix shows the same NV# for every peer: the GPU's own links count once
            through_switch = gpu.nvlinks_to_switch > 0
            per_gpu_links.append(gpu.active_nvlinks or (max(_nv_count(c) for c in snapshot.links[gpu.index])
                                                       if through_switch else matrix_links))
        names = {g.name for g in snapshot.gpus}
        model = nvlink_model(gpu_key_for(next(iter(names)))) if len(names) == 1 else None
        links = min(per_gpu_links)
        if model is None:
            return LinkReference("nvlink", None, f"every pair on NVLink ({links} links per GPU), but opgate has no "
                                 f"NVLink rate for {', '.join(sorted(names))} (add it to data/{TABLE}.toml)", "")
        for gpu, count in zip(snapshot.gpus, per_gpu_links):
            if count < model.links:
                findings.append(f"GPU{gpu.index} has {count} of its {model.links} NVLinks active")
        gbs = links * model.per_link_gbs_per_direction
        basis = (f"NVLink {model.generation}: {links} active links x {model.per_link_gbs_per_direction:g} GB/s per "
                 f"link and direction = {gbs:g} GB/s (the fewest of any GPU)")
        return LinkReference("nvlink", gbs, basis, model.source, tuple(findings))
    rates = []
    for gpu in snapshot.gpus:
        gen, width = gpu.pcie_max_generation or gpu.pcie_generation, gpu.pcie_max_width or gpu.pcie_width
        try:
            rates.append((pcie_theoretical_gbs(gen, width), gpu.index, gen, width) if gen and width else None)
        except (UnknownPcieGeneration, ValueError):
            rates.append(None)
    if any(r is None for r in rates) or not rates:
        return LinkReference("pcie", None, "some GPU pairs are not on NVLink and NVML gave no PCIe generation x "
                             "width for every GPU", "")
    known = [r for r in rates if r is not None]
    gbs, index, gen, width = min(known)
    widest = max(r[0] for r in known)
    for r in known:
        if r[0] < widest:
            findings.append(f"GPU{r[1]} is on PCIe Gen{r[2]} x{r[3]} ({r[0]:.1f} GB/s), below its siblings")
    return LinkReference("pcie", gbs, f"PCIe Gen{gen} x{width} = {gbs:.1f} GB/s per direction (GPU{index}, the "
                         "slowest link; some pairs are not on NVLink)", "data/pcie_link_rates.toml (PCI-SIG)",
                         tuple(findings))


@dataclass(frozen=True)
class CollectiveVerdict:
    outcome: Outcome
    reason: str
    figures: tuple[Figure, ...]
    remediation: str
    findings: tuple[str, ...] = field(default_factory=tuple)


def judge_collectives(run: CollectiveRun, ref: LinkReference) -> CollectiveVerdict:
    outcomes: list[Outcome] = []
    figures: list[Figure] = [
        Figure("ranks (one process per GPU)", run.ranks, key="collectives.ranks_one_process_per_gpu"),
        Figure("backend", f"{run.backend} {run.backend_version}".strip(), key="collectives.backend"),
        Figure("link reference", ref.basis, key="collectives.link_reference")]
    findings: list[str] = list(ref.findings)
    clauses: list[str] = []
    wrong = sorted({f"{r.op} at {r.size_bytes} B" for r in run.results if not r.correct})
    if wrong:
        outcomes.append(Outcome.FAILED)
        findings.append("wrong results: " + ", ".join(wrong[:4]))
    cap = run.size_cap_bytes
    largest_measured = max((r.size_bytes for r in run.results), default=0)
    figures.append(Figure("largest message measured", largest_measured, "B",
                          key="collectives.largest_message_measured"))
    if cap is not None and largest_measured < run.largest_requested_bytes:
        figures.append(Figure("size cap (share of the smallest free device memory of any rank)", cap, "B",
                              key="collectives.size_cap_share_of_the_smallest_free_device_memory_of_any_rank"))
        clauses.append(f"sizes capped at {_size(largest_measured)} by free memory (asked up to "
                       f"{_size(run.largest_requested_bytes)})")
    band = collective_band("busbw_over_link", ref.topology)
    judged = ref.per_direction_gbs is not None and largest_measured >= MIN_JUDGED_BYTES
    busbw_texts = []
    for op in OPS:
        top = run.largest(op)
        if top is None:
            continue
        at = f"{slug(op)}_{{}}_at_{slug(_size(top.size_bytes))}"  # the key of a figure of this op at its top size
        figures.append(Figure(f"{op} algbw at {_size(top.size_bytes)}", round(top.algbw_gbs, 2), "GB/s",
                              key=f"collectives.{at.format('algbw')}"))
        if judged:
            assert ref.per_direction_gbs is not None
            fraction = top.busbw_gbs / ref.per_direction_gbs
            outcomes.append(judge(fraction, band))
            figures.append(Figure(f"{op} busbw at {_size(top.size_bytes)}", round(top.busbw_gbs, 2), "GB/s",
                                  band_threshold(band, scale=ref.per_direction_gbs,
                                                 what=f"{band.pass_at:.0%} of {ref.basis} ({ref.source})"),
                                  key=f"collectives.{at.format('busbw')}"))
            figures.append(Figure(f"{op} busbw / link reference", round(100 * fraction, 1), "%",
                                  key=f"collectives.{slug(op)}_busbw_link_reference"))
            busbw_texts.append(f"{op} {top.busbw_gbs:.0f} ({fraction:.0%})")
        else:
            figures.append(Figure(f"{op} busbw at {_size(top.size_bytes)}", round(top.busbw_gbs, 2), "GB/s",
                                  key=f"collectives.{at.format('busbw')}"))
            busbw_texts.append(f"{op} {top.busbw_gbs:.1f}")
        skew = (max(top.per_rank_s) - min(top.per_rank_s)) / max(top.per_rank_s) if max(top.per_rank_s) > 0 else 0
        figures.append(Figure(f"{op} rank time spread at {_size(top.size_bytes)} (max-min)/max",
                              round(100 * skew, 1), "%",
                              key=f"collectives.{at.format('rank_time_spread')}_max_min_max"))
    if not judged:
        outcomes.append(Outcome.WARNED)
        why = (ref.basis if ref.per_direction_gbs is None else
               f"the largest message {_size(largest_measured)} is below the {_size(MIN_JUDGED_BYTES)} the band assumes")
        clauses.append(f"bus bandwidth not judged: {why}")
    small = [r for r in run.by_op("all_reduce") if r.size_bytes <= LATENCY_MAX_BYTES]
    if small:
        smallest = min(small, key=lambda r: r.size_bytes)
        latency_band = collective_band("small_allreduce_latency_us", ref.topology)
        outcomes.append(judge(smallest.latency_us, latency_band))
        figures.append(Figure(f"all_reduce latency at {smallest.size_bytes} B", round(smallest.latency_us, 2), "us",
                              band_threshold(latency_band),
                              key=f"collectives.all_reduce_latency_at_{smallest.size_bytes}_b"))
        for r in small:
            if r is not smallest:
                figures.append(Figure(f"all_reduce latency at {_size(r.size_bytes)}", round(r.latency_us, 2), "us",
                                      key=f"collectives.all_reduce_latency_at_{slug(_size(r.size_bytes))}"))
        clauses.append(f"{smallest.size_bytes} B all-reduce {smallest.latency_us:.1f} us")
    if run.straggler is not None:
        s = run.straggler
        lag_band = collective_band("straggler_lag_us", ref.topology)
        lag_outcome = judge(s.slowest_lag_us, lag_band)
        if lag_outcome != Outcome.PASSED and s.last_share < 0.5:
            lag_outcome = Outcome.PASSED  # late now and then, not consistently: jitter, nobody to name
        outcomes.append(lag_outcome)
        figures += [
            Figure("slowest rank (entered the probe's all-reduces last, on average)", s.slowest_rank,
                   key="collectives.slowest_rank_entered_the_probe_s_all_reduces_last_on_average"),
            Figure("slowest rank's device", run.devices[s.slowest_rank] if s.slowest_rank < len(run.devices) else "",
                   key="collectives.slowest_rank_s_device"),
            Figure("slowest rank's mean arrival lag", round(s.slowest_lag_us, 1), "us", band_threshold(lag_band),
                   key="collectives.slowest_rank_s_mean_arrival_lag"),
            Figure("slowest rank entered last in", f"{s.last_counts[s.slowest_rank]}/{s.iterations} iterations",
                   key="collectives.slowest_rank_entered_last_in"),
            Figure(f"probe all-reduce ({_size(s.size_bytes)}) after the last arrival", round(s.span_us, 1), "us",
                   key=f"collectives.probe_all_reduce_{slug(_size(s.size_bytes))}_after_the_last_arrival"),
        ]
        if lag_outcome != Outcome.PASSED:
            findings.append(f"rank {s.slowest_rank} ({run.devices[s.slowest_rank]}) is a straggler: it entered "
                            f"{s.slowest_lag_us:.0f} us after the first rank on average, last in "
                            f"{s.last_counts[s.slowest_rank]}/{s.iterations} iterations")
        else:
            clauses.append(f"slowest rank {s.slowest_rank} (lag {s.slowest_lag_us:.0f} us)")
    if ref.findings:
        outcomes.append(Outcome.WARNED)
    outcome = worst_outcome(outcomes) if outcomes else Outcome.WARNED
    reason = (f"{run.ranks} ranks over {ref.topology}: busbw at the largest size (GB/s) " + ", ".join(busbw_texts)
              + ("" if not clauses else "; " + "; ".join(clauses))
              + ("" if not findings else "; " + "; ".join(findings)))
    remediation = "" if outcome == Outcome.PASSED else (
        "Compare with nvidia-smi topo -m and nvidia-smi nvlink --status (links down, a GPU on a narrower link); "
        "run NCCL_DEBUG=INFO to see which transport NCCL chose (P2P/NVLink, SHM, NET); check that no other job "
        "shares the GPUs and that each rank's process sits on its GPU's NUMA node.")
    return CollectiveVerdict(outcome, reason, tuple(figures), remediation, tuple(findings))


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def render_sweep(run: CollectiveRun, ops: Sequence[str] = OPS) -> str:
    """The sweep as nccl-tests prints it: size, count, time, algbw, busbw, per op (plain text)."""
    lines = [f"# {run.backend} {run.backend_version}, {run.ranks} ranks: {', '.join(run.devices)}",
             f"# {'op':<15}{'size (B)':>12}{'time (us)':>12}{'algbw GB/s':>12}{'busbw GB/s':>12}"
             f"{'slowest/fastest rank':>22}{'ok':>4}"]
    for op in ops:
        for r in run.by_op(op):
            ratio = max(r.per_rank_s) / min(r.per_rank_s) if min(r.per_rank_s) > 0 else float("inf")
            lines.append(f"  {op:<15}{r.size_bytes:>12}{r.latency_us:>12.2f}{r.algbw_gbs:>12.3f}{r.busbw_gbs:>12.3f}"
                         f"{ratio:>22.2f}{'yes' if r.correct else 'NO':>4}")
    if run.straggler:
        s = run.straggler
        lags = ", ".join(f"r{i}={lag:.0f}" for i, lag in enumerate(s.mean_lag_us))
        lines.append(f"# arrival probe ({s.iterations} x all_reduce {s.size_bytes} B): slowest rank {s.slowest_rank}; "
                     f"mean lag us {lags}; last counts {list(s.last_counts)}")
    return "\n".join(lines)
