"""Pure judgement: a measured figure and a band in, an outcome out. No GPU, no I/O."""

from __future__ import annotations

import math
from typing import Sequence

from opgate.gpu.judge.references import Band
from opgate.model.results import Outcome, Threshold


def judge(value: float | None, band: Band) -> Outcome:
    """passed / warned / failed for `value` against `band`; a missing or non-finite value is an error."""
    if value is None or not math.isfinite(value):
        return Outcome.ERROR
    if band.comparison == ">=":
        if value >= band.pass_at:
            return Outcome.PASSED
        return Outcome.WARNED if value >= band.warn_at else Outcome.FAILED
    if band.comparison == "<=":
        if value <= band.pass_at:
            return Outcome.PASSED
        return Outcome.WARNED if value <= band.warn_at else Outcome.FAILED
    raise ValueError(f"band for {band.metric!r} has unknown comparison {band.comparison!r}")


def band_threshold(band: Band, scale: float = 1.0, what: str = "") -> Threshold:
    """The pass line of `band` as a results.Threshold, scaled into the figure's unit (e.g. fraction x
    datasheet TB/s) and citing where the band comes from."""
    prefix = f"{what}: " if what else ""
    return Threshold(value=round(band.pass_at * scale, 6), comparison=band.comparison,
                     source=f"{prefix}{band.source}")


def relative_spread(values: Sequence[float]) -> float:
    """(max - min) / max of per-GPU figures: 0 means every GPU got the same share."""
    if not values:
        raise ValueError("spread of no values")
    top = max(values)
    return (top - min(values)) / top if top > 0 else float("inf")
