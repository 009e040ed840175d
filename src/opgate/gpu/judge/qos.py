"""Pure judging of a QoS measurement (opgate.gpu.probes.qos): p50/p95/p99 per sharing mode, each mode's p95 against
the SLO, which sharing modes keep it, and the per-mode table for scripts and logs. No GPU: recorded measurements
test it on a CPU. The doctor check (`opgate.doctor.qos`, through `judge_qos`) and the verify stage
(`opgate.verify.qos_stage`) both judge through `judge_modes`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from opgate.data import load_table
from opgate.gpu.probes.qos import QosMeasurement
from opgate.gpu.probes.timing import percentile
from opgate.model.results import Figure, Outcome, Threshold, slug

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


def qos_policy() -> dict[str, tuple[float, str]]:
    """metric -> (value, source) from data/qos_policy.toml."""
    return {row["metric"]: (float(row["value"]), row["source"]) for row in load_table("qos_policy")}


def slo_for(alone_p95_us: float, declared_us: float | None, policy: Mapping[str, tuple[float, str]]
            ) -> tuple[float, str]:
    """The probe's P95 SLO in microseconds and where it comes from: the declared one, else derived from the probe
    alone (a factor of its P95, capped at an added margin; data/qos_policy.toml)."""
    if declared_us is not None:
        return declared_us, "declared SLO (OPGATE_QOS_SLO_US)"
    factor, source = policy["slo_factor_of_alone_p95"]
    added, _ = policy["slo_max_added_us"]
    return min(factor * alone_p95_us, alone_p95_us + added), source


def judge_qos(measurement: QosMeasurement, declared_slo_us: float | None = None
              ) -> tuple[Outcome, str, list[Figure], str]:
    """doctor.qos's verdict: (outcome, reason, figures, remediation); pure, so recorded measurements test it on a
    CPU."""
    policy = qos_policy()
    alone = measurement.mode("alone")
    if alone is None or not alone.latencies_us:
        reason = alone.unavailable if alone else "the probe alone was not measured"
        return Outcome.ERROR, f"probe alone could not be measured: {reason}", [], ""
    alone_stats = latency_summary(alone.latencies_us)
    slo, slo_source = slo_for(alone_stats["p95"], declared_slo_us, policy)
    verdicts, figures = judge_modes(measurement, slo, slo_source, word="probe")
    if measurement.pinned_allocated_mb is not None:
        slack, slack_source = policy["pinned_limit_slack_mb"]
        figures.append(Figure("MPS client memory under the pinned limit", measurement.pinned_allocated_mb, "MB",
                              Threshold(measurement.pinned_limit_mb + slack, "<=", slack_source),
                              key="qos.mps_client_memory_under_the_pinned_limit"))
    enforced = (None if measurement.pinned_allocated_mb is None else
                measurement.pinned_allocated_mb <= measurement.pinned_limit_mb + policy["pinned_limit_slack_mb"][0])
    figures.append(Figure("MPS pinned-memory limit", measurement.pinned_note, key="qos.mps_pinned_memory_limit"))
    holds, breaks, protected = sharing_summary(verdicts)
    text = (f"SLO p95 <= {slo:.0f} us (alone {alone_stats['p95']:.0f} us); holds under: {', '.join(holds) or 'none'}"
            f"; broken under: {', '.join(breaks) or 'none'}")
    if enforced is False:
        text += f"; MPS pinned-memory limit NOT enforced ({measurement.pinned_note})"
    elif enforced:
        text += "; MPS pinned-memory limit enforced"
    if next(v for v in verdicts if v.mode == "alone").holds_slo is False:
        return (Outcome.FAILED, "the probe misses its SLO even alone: " + text, figures,
                "The declared SLO is below what this GPU delivers to one small kernel; relax it or measure again "
                "on an idle GPU.")
    if not protected or enforced is False:
        return (Outcome.WARNED, text, figures,
                "A saturating neighbour breaks the SLO under every sharing mode measured here: give the "
                "latency-sensitive service its own MIG instance or GPU (opgate plan mig), or cap the neighbour "
                "harder (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)." if not protected else
                "Set CUDA_MPS_PINNED_DEVICE_MEM_LIMIT in the MPS control daemon too (set_default_device_pinned_mem_limit)"
                " and check the driver: a client could take more memory than its limit.")
    return Outcome.PASSED, text, figures, ""
