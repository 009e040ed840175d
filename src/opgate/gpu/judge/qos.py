"""Pure judging of a QoS measurement (opgate.gpu.probes.qos): p50/p95/p99 per sharing mode, each mode's p95 against
the SLO, which sharing modes keep it, and the per-mode table for scripts and logs. No GPU: recorded measurements
test it on a CPU. The doctor check (`opgate.doctor.qos`) and the verify stage (`opgate.verify.qos_stage`) both
judge through `judge_modes`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from opgate.gpu.probes.qos import QosMeasurement
from opgate.gpu.probes.timing import percentile
from opgate.results import Figure, Threshold, slug

SHARING_MODES = ("time_sliced", "priority", "mps")
PROTECTING_MODES = ("priority", "mps")  # the modes meant to keep a latency-sensitive request's time
LATENCY_QUANTILES = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0))


def latency_summary(values: Sequence[float]) -> dict[str, float]:
    return {name: percentile(list(values), q) for name, q in LATENCY_QUANTILES}


@dataclass(frozen=True)
class ModeVerdict:
    """One sharing mode's percentiles and whether the SLO holds (None: not measured, or no SLO to judge)."""

    mode: str
    samples: int
    percentiles_us: dict[str, float] = field(default_factory=dict)
    holds_slo: bool | None = None
    unavailable: str = ""


def judge_modes(measurement: QosMeasurement, slo_us: float | None, slo_source: str, word: str = "probe",
                key_stem: str = "qos") -> tuple[list[ModeVerdict], list[Figure]]:
    """Per mode: p50/p95/p99 figures (p95 against the SLO when there is one) and the verdict. `key_stem` begins
    the figures' keys: "qos" for the doctor's check, "verify.qos" for verify's stage."""
    verdicts: list[ModeVerdict] = []
    figures: list[Figure] = []
    for mode in measurement.modes:
        key = f"{key_stem}.{slug(mode.mode)}"
        if not mode.latencies_us:
            verdicts.append(ModeVerdict(mode.mode, 0, unavailable=mode.unavailable))
            figures.append(Figure(f"{mode.mode}", f"not measured: {mode.unavailable}", key=key))
            continue
        stats = latency_summary(mode.latencies_us)
        for q in ("p50", "p99"):
            figures.append(Figure(f"{mode.mode} {word} {q}", round(stats[q], 1), "us", key=f"{key}_{slug(word)}_{q}"))
        threshold = Threshold(round(slo_us, 1), "<=", slo_source) if slo_us is not None else None
        figures.append(Figure(f"{mode.mode} {word} p95", round(stats["p95"], 1), "us", threshold,
                              key=f"{key}_{slug(word)}_p95"))
        verdicts.append(ModeVerdict(mode.mode, len(mode.latencies_us), stats,
                                    None if slo_us is None else stats["p95"] <= slo_us))
    return verdicts, figures


def sharing_summary(verdicts: Sequence[ModeVerdict]) -> tuple[list[str], list[str], list[str]]:
    """(sharing modes the SLO holds under, those it breaks under, protecting modes that keep it)."""
    by_mode = {v.mode: v.holds_slo for v in verdicts if v.holds_slo is not None}
    holds = [m for m in SHARING_MODES if by_mode.get(m)]
    breaks = [m for m in SHARING_MODES if m in by_mode and not by_mode[m]]
    return holds, breaks, [m for m in PROTECTING_MODES if by_mode.get(m)]


def format_mode_table(verdicts: Sequence[ModeVerdict], slo_us: float | None = None) -> str:
    """The percentiles per mode as a plain-text table (scripts and logs)."""
    lines = [f"{'mode':12s} {'p50 us':>10s} {'p95 us':>10s} {'p99 us':>10s} {'n':>5s}  SLO"
             + (f" p95 <= {slo_us:.0f} us" if slo_us is not None else " (none declared)")]
    for v in verdicts:
        if not v.samples:
            lines.append(f"{v.mode:12s} not measured: {v.unavailable}")
            continue
        p = v.percentiles_us
        verdict = "-" if v.holds_slo is None else ("holds" if v.holds_slo else "BROKEN")
        lines.append(f"{v.mode:12s} {p['p50']:10.1f} {p['p95']:10.1f} {p['p99']:10.1f} {v.samples:5d}  {verdict}")
    return "\n".join(lines)
