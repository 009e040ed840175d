"""doctor.p2p's judgement: the measured link matrix (opgate.gpu.probes.link_matrix) beside NVML's topology, rendered as
matrices, with the pairs far below their same-class siblings as findings. `link_matrix_verdict` is pure (recorded
matrices test it); `P2PCheck` in opgate.doctor.gpu_probes measures and calls it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from opgate.gpu.judge.bands import band_threshold
from opgate.gpu.probes.link_matrix import PairFigures
from opgate.gpu.judge.link_matrix import PairOutlier, find_outliers, render_link_matrix
from opgate.gpu.judge.references import Band
from opgate.results import Figure, Outcome, worst_outcome


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
