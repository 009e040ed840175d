"""Fleet-relative baselines: is this node's figure normal *for its GPU model and driver in this fleet*?

Nodes are grouped by (GPU model, driver); within a group each figure key gets a robust centre and
spread (median and MAD), and a node is an outlier when its modified z-score exceeds 3.5
(Iglewicz & Hoaglin, "How to Detect and Handle Outliers", ASQC 1993: z = 0.6745 (x - median) / MAD,
the same as (x - median) / (1.4826 MAD)) and it is at least MIN_RELATIVE_DEVIATION away from the
median, so a very tight group does not flag run-to-run noise. This sits beside the datasheet bands
the doctor already judges with: it finds the node that is in-band but slower than its siblings.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

from opgate.fleet.keys import figure_key
from opgate.model.results import CheckResult

MODIFIED_Z_LIMIT = 3.5
MAD_TO_SIGMA = 1.4826  # 1 / Phi^-1(3/4): makes the MAD a consistent estimator of a normal sigma
MIN_RELATIVE_DEVIATION = 0.05
MIN_GROUP_SIZE = 3  # below three nodes a median says nothing about which one is odd
NO_GPU = "no GPU"
ON_CPU = ("CPU (no GPU used)", "")  # the group of figures a check measured on the CPU, whatever GPUs its node has


@dataclass(frozen=True)
class GpuIdentity:
    index: int
    model: str
    driver: str


@dataclass(frozen=True)
class NodeFigures:
    """What the baseline needs from one node's report."""

    node: str
    gpus: tuple[GpuIdentity, ...]
    results: tuple[CheckResult, ...]
    driver: str = ""


@dataclass(frozen=True)
class Sample:
    node: str
    gpu: str
    figure: str
    value: float
    unit: str


@dataclass(frozen=True)
class Outlier:
    key: str
    group: tuple[str, str]  # (model, driver)
    sample: Sample
    median: float
    mad: float
    modified_z: float
    group_size: int

    @property
    def relative_deviation(self) -> float:
        return (self.sample.value - self.median) / abs(self.median) if self.median else math.inf

    def sentence(self) -> str:
        where = f"{self.sample.node} GPU{self.sample.gpu}" if self.sample.gpu else self.sample.node
        direction = "under" if self.sample.value < self.median else "over"
        unit = f" {self.sample.unit}" if self.sample.unit else ""
        model, driver = self.group
        z = "inf" if math.isinf(self.modified_z) else f"{self.modified_z:.1f}"
        return (f"{where} {self.sample.figure} {self.sample.value:.4g}{unit} = "
                f"{abs(self.relative_deviation):.0%} {direction} this fleet's median for {model} "
                + (f"(driver {driver}) " if driver else "")
                + f"({self.median:.4g}{unit}, {self.group_size} samples), "
                f"{z} MADs (modified z-score, limit {MODIFIED_Z_LIMIT})")


def _numeric(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _group_of(node: NodeFigures, gpu_label: str) -> tuple[str, str]:
    by_index = {g.index: g for g in node.gpus}
    index_text = gpu_label.split("-")[0]
    if index_text.isdigit() and int(index_text) in by_index:
        gpu = by_index[int(index_text)]
        return gpu.model, gpu.driver
    models = sorted({g.model for g in node.gpus})
    if not models:
        return NO_GPU, node.driver or "none"
    # A host-level figure on a host of several GPUs: its group is the host's mix of models.
    return " + ".join(models), node.gpus[0].driver


def _measured_on_cpu(result: CheckResult) -> bool:
    """Whether the check ran on the CPU although the node has GPUs (a verify check records its device): a node
    whose CUDA sees none of the GPUs NVML lists (CUDA_VISIBLE_DEVICES="") judged softmax with Triton's
    interpreter, and its errors, pooled with the GPU node's as "NVIDIA H200", made ten false outliers (fleet run on
    the H200 host, 2026-12-03)."""
    device = str(result.extra.get("device", "")).lower()  # "cuda", "cpu", "triton-interpreter (cpu)", ...
    return bool(device) and "cuda" not in device and "gpu" not in device


def collect_samples(nodes: Sequence[NodeFigures]) -> dict[tuple[str, tuple[str, str]], list[Sample]]:
    """Every numeric figure of every node, by (figure key, (model, driver))."""
    groups: dict[tuple[str, tuple[str, str]], list[Sample]] = {}
    for node in nodes:
        for result in node.results:
            for figure in result.figures:
                value = _numeric(figure.value)
                if value is None:
                    continue
                fkey = figure_key(result, figure)
                sample = Sample(node.node, fkey.gpu, fkey.name, value, figure.unit)
                group = ON_CPU if _measured_on_cpu(result) else _group_of(node, fkey.gpu)
                groups.setdefault((fkey.key, group), []).append(sample)
    return groups


def robust_centre(values: Sequence[float]) -> tuple[float, float]:
    """(median, MAD)."""
    median = statistics.median(values)
    return median, statistics.median(abs(v - median) for v in values)


def find_outliers(nodes: Sequence[NodeFigures]) -> list[Outlier]:
    outliers: list[Outlier] = []
    for (key, group), samples in sorted(collect_samples(nodes).items()):
        if len(samples) < MIN_GROUP_SIZE:
            continue
        median, mad = robust_centre([s.value for s in samples])
        for sample in samples:
            deviation = abs(sample.value - median)
            if deviation == 0:
                continue
            relative = deviation / abs(median) if median else math.inf
            modified_z = deviation / (MAD_TO_SIGMA * mad) if mad > 0 else math.inf
            if modified_z > MODIFIED_Z_LIMIT and relative >= MIN_RELATIVE_DEVIATION:
                outliers.append(Outlier(key, group, sample, median, mad, modified_z, len(samples)))
    outliers.sort(key=lambda o: (-min(o.modified_z, 1e12), o.sample.node))
    return outliers


def baseline_summary(nodes: Sequence[NodeFigures]) -> list[Mapping[str, object]]:
    """Median and MAD of every (key, group) with enough samples: the fleet's own expected values."""
    rows = []
    for (key, (model, driver)), samples in sorted(collect_samples(nodes).items()):
        if len(samples) < MIN_GROUP_SIZE:
            continue
        median, mad = robust_centre([s.value for s in samples])
        rows.append({"key": key, "model": model, "driver": driver, "samples": len(samples),
                     "median": median, "mad": mad, "unit": samples[0].unit})
    return rows
