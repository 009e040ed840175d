"""Summary statistics of repeated timings: median and spread, never a single run."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (q in 0..100), as numpy's default; ValueError on no values."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q} is outside 0..100")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = math.ceil(position)
    if low == high:
        return float(ordered[low])
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


@dataclass(frozen=True)
class Samples:
    """Repeated measurements of one quantity (e.g. milliseconds per copy) and their summary."""

    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError("Samples needs at least one value")
        if any(not math.isfinite(v) for v in self.values):
            raise ValueError(f"Samples got a non-finite value: {self.values}")

    @classmethod
    def of(cls, values: Sequence[float]) -> "Samples":
        return cls(tuple(float(v) for v in values))

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        return float(statistics.median(self.values))

    @property
    def p10(self) -> float:
        return percentile(self.values, 10)

    @property
    def p90(self) -> float:
        return percentile(self.values, 90)

    @property
    def p95(self) -> float:
        return percentile(self.values, 95)

    @property
    def minimum(self) -> float:
        return min(self.values)

    @property
    def maximum(self) -> float:
        return max(self.values)

    @property
    def relative_spread(self) -> float:
        """(p90 - p10) / median: how much one measurement of this quantity moves between runs."""
        median = self.median
        return (self.p90 - self.p10) / median if median else float("inf")

    def summary(self) -> dict[str, float]:
        return {"n": self.n, "median": self.median, "p10": self.p10, "p90": self.p90, "p95": self.p95,
                "min": self.minimum, "max": self.maximum}


def bandwidth_tbs(bytes_moved: float, milliseconds: float) -> float:
    """Bytes over milliseconds as TB/s (10^12 bytes per second)."""
    if milliseconds <= 0:
        raise ValueError(f"a transfer cannot take {milliseconds} ms; the timing is broken")
    return bytes_moved / (milliseconds * 1e-3) / 1e12


def bandwidth_gbs(bytes_moved: float, milliseconds: float) -> float:
    """Bytes over milliseconds as GB/s (10^9 bytes per second)."""
    return bandwidth_tbs(bytes_moved, milliseconds) * 1e3
