"""Pure: render the GPU-to-GPU link matrix (NVML topology beside the measured pair figures) and find the pairs far
below their siblings. A sibling is another ordered pair of the same link class (NV18, PIX, SYS, ...) and the same
peer access: a PCIe pair slower than an NVLink pair is the topology, not a finding, and a pair without peer access
is its own finding; one NVLink pair at half its siblings is."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

from opgate.gpu.judge.bands import judge
from opgate.gpu.probes.link_matrix import PairFigures
from opgate.gpu.judge.references import Band
from opgate.results import Outcome

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
