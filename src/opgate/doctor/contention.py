"""Check: link contention on a multi-GPU host (`opgate doctor --level standard --check contention`).

Every GPU copying to the host at once (each direction) and every ordered GPU pair copying at once, against each
alone (opgate.gpu.probes.contention); judged here by pure functions: the share each GPU keeps against alone
(`contention_vs_alone`), the spread across GPUs (`host_contention_spread`, data/gpu_probe_policy.toml), the worst
GPU or pair named. Skipped on fewer than two GPUs; runs alone on the host (`exclusive`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

from opgate.checks.base import CheckContext
from opgate.doctor.gpu_probes import GpuProbeCheck
from opgate.errors import SkipCheck
from opgate.gpu.probes.contention import ContentionFigures
from opgate.gpu.judge.bands import band_threshold, judge, relative_spread
from opgate.gpu.judge.references import Band
from opgate.results import CheckResult, Figure, Outcome, slug, worst_outcome


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
    figures = [f for v in verdicts for f in v.figures]
    return worst_outcome([v.outcome for v in verdicts]), "; ".join(v.text for v in verdicts), figures


class ContentionCheck(GpuProbeCheck):
    check_id = "doctor.contention"
    title = "Link contention: every GPU to the host at once, every GPU pair at once, against each alone"
    timeout_s: ClassVar[float] = 180.0

    def probe(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.probes.contention import measure_host_contention, measure_pair_contention
        from opgate.gpu.judge.references import policy_band

        devices = self.devices()
        if len(devices) < 2:
            raise SkipCheck(f"contention needs 2 or more GPUs; this host has {len(devices)}")
        share_band = policy_band("contention_vs_alone", None)
        spread_band = policy_band("host_contention_spread", None)
        measured = [measure_host_contention(devices, "H2D"), measure_host_contention(devices, "D2H"),
                    measure_pair_contention(devices)]
        verdicts = [judge_contention(m, share_band, spread_band) for m in measured]
        outcome, reason, figures = combine_contention(verdicts)
        extra: dict[str, Any] = {"measurements": [m.to_dict() for m in measured],
                                 "method": "alone and together by the same copy routine; per-key GB/s from its own "
                                           "CUDA events, aggregate from the host clock"}
        remediation = "" if outcome == Outcome.PASSED else (
            "GPUs that lose most when all copy at once share a PCIe switch, root port or NVLink path: check "
            "nvidia-smi topo -m, the PCIe width of each GPU (nvidia-smi -q -d PCI), and spread the host-heavy jobs "
            "over GPUs on different switches/NUMA nodes.")
        return self.result(outcome, reason, figures, remediation=remediation, extra=extra)
