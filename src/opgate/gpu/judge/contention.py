"""Pure judging of link contention (opgate.gpu.probes.contention): the share of its alone figure each GPU or pair keeps
when all copy at once (`contention_vs_alone`), the spread across GPUs (`host_contention_spread`,
data/gpu_probe_policy.toml), the worst GPU or pair named. No GPU: hand-written figures test it on a CPU. The doctor's
`doctor.contention` check (opgate.doctor.contention) measures and calls it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from opgate.gpu.judge.bands import band_threshold, judge, relative_spread
from opgate.gpu.judge.references import Band
from opgate.gpu.probes.contention import ContentionFigures
from opgate.model.results import Figure, Outcome, slug, worst_outcome


@dataclass(frozen=True)
class ContentionVerdict:
    kind: str
    outcome: Outcome
    spread: float  # (max - min) / max of the together figures
    worst: str  # the key (GPU index or "src->dst") that kept the smallest share of its alone figure
    worst_share: float
    shares: dict[str, float]
    figures: tuple[Figure, ...]
    text: str


def judge_contention(figures: ContentionFigures, share_band: Band, spread_band: Band) -> ContentionVerdict:
    """Pure: each key's together/alone share against `share_band`, the spread of the together figures against
    `spread_band`; the worst key named."""
    keys = [k for k in figures.together_gbs if k in figures.alone_gbs]
    if not keys:
        raise ValueError(f"{figures.kind}: no key measured both alone and together")
    shares = {k: (figures.together_gbs[k] / figures.alone_gbs[k]) if figures.alone_gbs[k] > 0 else 0.0 for k in keys}
    worst = min(keys, key=lambda k: shares[k])
    spread = relative_spread([figures.together_gbs[k] for k in keys])
    outcomes = [judge(shares[worst], share_band), judge(spread, spread_band)]
    label = (lambda k: f"GPU{k.replace('->', '->GPU')}") if figures.kind == "P2P" else (lambda k: f"GPU{k}")
    what = "peer copies, every pair at once" if figures.kind == "P2P" else f"{figures.kind}, every GPU at once"
    kind, stem = slug(figures.kind), f"contention.{slug(what)}"
    out: list[Figure] = []
    for k in keys:
        gpu, _, peer = k.partition("->")
        labels = {"gpu": gpu, "peer": peer} if peer else {"gpu": gpu}
        out.append(Figure(f"{label(k)} {figures.kind} alone", round(figures.alone_gbs[k], 1), "GB/s",
                          key=f"contention.{kind}_alone", labels=labels))
        out.append(Figure(f"{label(k)} {figures.kind} together", round(figures.together_gbs[k], 1), "GB/s",
                          key=f"contention.{kind}_together", labels=labels))
    out += [
        Figure(f"{what}: aggregate", round(figures.aggregate_together_gbs, 1), "GB/s", key=f"{stem}_aggregate"),
        Figure(f"{what}: worst", label(worst), key=f"{stem}_worst"),
        Figure(f"{what}: worst's share of its alone figure", round(100 * shares[worst], 1), "%",
               band_threshold(share_band, scale=100.0), key=f"{stem}_worst_s_share_of_its_alone_figure"),
        Figure(f"{what}: spread (max-min)/max", round(100 * spread, 1), "%", band_threshold(spread_band, scale=100.0),
               key=f"{stem}_spread_max_min_max"),
    ]
    text = (f"{what}: {figures.aggregate_together_gbs:.1f} GB/s aggregate, spread {spread:.0%}, worst {label(worst)} "
            f"kept {shares[worst]:.0%} of its {figures.alone_gbs[worst]:.1f} GB/s alone")
    return ContentionVerdict(figures.kind, worst_outcome(outcomes), spread, worst, shares[worst], shares, tuple(out),
                             text)


def combine_contention(verdicts: Sequence[ContentionVerdict]) -> tuple[Outcome, str, list[Figure]]:
    """The check's verdict from its three measurements: the worst outcome, their texts, all their figures."""
    figures = [f for v in verdicts for f in v.figures]
    return worst_outcome([v.outcome for v in verdicts]), "; ".join(v.text for v in verdicts), figures
