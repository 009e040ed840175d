"""Pure: render the GPU-to-GPU link matrix (NVML topology beside the measured pair figures) and find the pairs far
below their siblings. A sibling is another ordered pair of the same link class (NV18, PIX, SYS, ...) and the same
peer access: a PCIe pair slower than an NVLink pair is the topology, not a finding, and a pair without peer access
is its own finding; one NVLink pair at half its siblings is. `link_matrix_verdict` is doctor.p2p's whole verdict
(recorded matrices test it); the check (opgate.doctor.gpu_checks.p2p) measures and calls it."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

from opgate.gpu.judge.bands import band_threshold, judge
from opgate.gpu.probes.link_matrix import PairFigures
from opgate.gpu.judge.references import Band
from opgate.model.results import Figure, Outcome, worst_outcome

# (metric, what it is, unit, higher is better)
METRICS: tuple[tuple[str, str, str, bool], ...] = (
    ("copy_gbs", "peer copy (copy engine)", "GB/s", True),
    ("read_gbs", "peer read (kernel on dst loads src memory)", "GB/s", True),
    ("write_gbs", "peer write (kernel on src stores to dst memory)", "GB/s", True),
    ("latency_us", "4-byte peer copy latency", "us", False),
)


@dataclass(frozen=True)
class PairOutlier:
    src: int
    dst: int
    link: str
    metric: str
    value: float
    sibling_median: float
    fraction: float  # value / sibling median (median / value for latency): 1.0 = like its siblings
    outcome: Outcome

    def describe(self) -> str:
        unit = "us" if self.metric == "latency_us" else "GB/s"
        what = {"copy_gbs": "peer copy", "read_gbs": "peer read", "write_gbs": "peer write",
                "latency_us": "latency"}.get(self.metric, self.metric)
        return (f"GPU{self.src}->GPU{self.dst} ({self.link}) {what} {self.value:.2f} {unit}"
                f" is {self.fraction:.0%} of its siblings' median {self.sibling_median:.2f}")


def _value(pair: PairFigures, metric: str) -> float | None:
    value = getattr(pair, metric)
    return None if value is None else float(value)


def find_outliers(pairs: Sequence[PairFigures], links: Sequence[Sequence[str]], band: Band) -> list[PairOutlier]:
    """Every (pair, metric) whose value against the median of its same-class siblings is not `passed` by `band`
    (a fraction, >=). With one pair in a class there is nothing to compare: never an outlier."""
    found: list[PairOutlier] = []
    for metric, _what, _unit, higher_better in METRICS:
        for pair in pairs:
            value = _value(pair, metric)
            if value is None:
                continue
            link = links[pair.src][pair.dst]
            siblings = [v for p in pairs if p is not pair and links[p.src][p.dst] == link
                        and p.peer_access == pair.peer_access for v in [_value(p, metric)] if v is not None]
            if not siblings:
                continue
            median = statistics.median(siblings)
            if median <= 0 or value <= 0:
                continue
            fraction = value / median if higher_better else median / value
            outcome = judge(fraction, band)
            if outcome != Outcome.PASSED:
                found.append(PairOutlier(pair.src, pair.dst, link, metric, value, median, fraction, outcome))
    return found


def _grid(title: str, count: int, cell: Callable[[int, int], str], extra_column: Sequence[str] = (),
          extra_title: str = "") -> list[str]:
    width = max(6, max((len(cell(i, j)) for i in range(count) for j in range(count)), default=1) + 1)
    header = f"{title:<8}" + "".join(f"{'GPU' + str(j):>{width}}" for j in range(count))
    if extra_column:
        header += f"  {extra_title}"
    rows = [header]
    for i in range(count):
        row = f"{'GPU' + str(i):<8}" + "".join(f"{cell(i, j):>{width}}" for j in range(count))
        if extra_column:
            row += f"  {extra_column[i]}"
        rows.append(row)
    return rows


def render_link_matrix(links: Sequence[Sequence[str]], pairs: Sequence[PairFigures], numa: Sequence[int] = (),
                       outliers: Sequence[PairOutlier] = ()) -> str:
    """nvidia-smi-topo-like text: the link classes with each GPU's NUMA node, then one matrix per measured
    metric (row = source GPU, column = destination), outliers marked with '!'."""
    count = len(links)
    by_pair = {(p.src, p.dst): p for p in pairs}
    flagged = {(o.src, o.dst, o.metric) for o in outliers}
    lines = _grid("link", count, lambda i, j: links[i][j],
                  [str(n) if n >= 0 else "?" for n in numa] if numa else (), "NUMA")
    for metric, what, unit, _higher in METRICS:
        if not any(_value(p, metric) is not None for p in pairs):
            continue

        def cell(i: int, j: int, metric: str = metric) -> str:
            if i == j:
                return "X"
            pair = by_pair.get((i, j))
            value = None if pair is None else _value(pair, metric)
            if value is None:
                return "-"
            mark = "!" if (i, j, metric) in flagged else ""
            return f"{value:.2f}{mark}" if unit == "us" else f"{value:.1f}{mark}"

        lines.append("")
        lines.append(f"{what} [{unit}], row = source, column = destination")
        lines += _grid(metric.split("_")[0], count, cell)
    if outliers:
        lines.append("")
        lines += ["! " + o.describe() for o in outliers]
    return "\n".join(lines)


@dataclass(frozen=True)
class LinkMatrixVerdict:
    outcome: Outcome
    reason: str
    figures: tuple[Figure, ...]
    remediation: str
    matrix_text: str
    outliers: tuple[PairOutlier, ...]


def link_matrix_verdict(pairs: Sequence[PairFigures], links: Sequence[Sequence[str]], numa: Sequence[int],
                        band: Band) -> LinkMatrixVerdict:
    """doctor.p2p's verdict: every ordered pair's figures beside its NVML link class, the pairs far below their
    same-class siblings and those without peer access as findings, and the matrices rendered as text."""
    outliers = find_outliers(pairs, links, band)
    figures: list[Figure] = []
    for p in pairs:
        tag = f"GPU{p.src}->GPU{p.dst}"
        pair = {"gpu": str(p.src), "peer": str(p.dst)}
        figures += [Figure(f"{tag} link (NVML)", links[p.src][p.dst], key="p2p.link_nvml", labels=pair),
                    Figure(f"{tag} peer copy", round(p.copy_gbs, 1), "GB/s", key="p2p.bandwidth", labels=pair),
                    Figure(f"{tag} peer read (kernel on GPU{p.dst})",
                           None if p.read_gbs is None else round(p.read_gbs, 1), "GB/s",
                           key=f"p2p.peer_read_kernel_on_gpu{p.dst}", labels=pair),
                    Figure(f"{tag} peer write (kernel on GPU{p.src})",
                           None if p.write_gbs is None else round(p.write_gbs, 1), "GB/s",
                           key=f"p2p.peer_write_kernel_on_gpu{p.src}", labels=pair),
                    Figure(f"{tag} 4-byte copy latency", round(p.latency_us, 3), "us", key="p2p.latency", labels=pair),
                    Figure(f"{tag} peer access", p.peer_access, key="p2p.peer_access", labels=pair)]
    figures.append(Figure("pair vs same-link siblings (worst)",
                          round(100 * min((o.fraction for o in outliers), default=1.0), 1), "%",
                          band_threshold(band, scale=100.0), key="p2p.pair_vs_same_link_siblings_worst"))
    outcomes = [o.outcome for o in outliers] or [Outcome.PASSED]
    missing = [p for p in pairs if not p.peer_access]
    copies = [p.copy_gbs for p in pairs]
    latencies = [p.latency_us for p in pairs]
    summary = (f"{len(pairs)} ordered pairs: peer copy {min(copies):.1f}..{max(copies):.1f} GB/s, latency "
               f"{min(latencies):.2f}..{max(latencies):.2f} us")
    reads = [p.read_gbs for p in pairs if p.read_gbs is not None]
    writes = [p.write_gbs for p in pairs if p.write_gbs is not None]
    if reads and writes:
        summary += f", read {min(reads):.1f}..{max(reads):.1f}, write {min(writes):.1f}..{max(writes):.1f} GB/s"
    problems: list[str] = []
    if missing:
        outcomes.append(Outcome.WARNED)
        problems.append("no peer access for " + ", ".join(f"GPU{p.src}->GPU{p.dst}" for p in missing)
                        + " (copies staged through the host)")
    if outliers:
        problems.append("; ".join(o.describe() for o in outliers[:4])
                        + (f" (+{len(outliers) - 4} more)" if len(outliers) > 4 else ""))
    outcome = worst_outcome(outcomes)
    reason = summary + ("; " + "; ".join(problems) if problems else "; peer access on every pair, no pair below "
                        "its siblings")
    remediation = "" if outcome == Outcome.PASSED else (
        "Check the topology (nvidia-smi topo -m), NVLink state (nvidia-smi nvlink --status: a link down or "
        "trained to fewer lanes), ACS/IOMMU settings and that the GPUs share an NVLink or PCIe switch.")
    return LinkMatrixVerdict(outcome, reason, tuple(figures), remediation,
                             render_link_matrix(links, pairs, numa, outliers), tuple(outliers))


def unknown_links(count: int, why: str) -> list[list[str]]:
    """A link matrix with every class unknown ("?"), when NVML cannot say: pairs are then all one class."""
    del why
    return [["X" if i == j else "?" for j in range(count)] for i in range(count)]
