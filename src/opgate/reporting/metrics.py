"""Report schema 2: a stable key, labels, a numeric value and a unit for every figure.

Checks name their figures in prose for people ("GPU0 HBM read (opgate kernel)"); machines that track a figure
across runs need a key that does not move ("hbm.read_bandwidth") and the variable parts as labels
({"gpu": "0"}). The shipped checks set both where they make the figure (`Figure.key`, `Figure.labels`), and the
runner gives every result the stage and labels its task was planned with (`CheckResult.stage`, `.labels`); a
figure's labels are its result's merged with its own.

A figure without a key (a third-party check's, or one read from a report written before keys were set at the
source) gets both derived here from the check id and the figure name: a small table for the doctor's figures
whose names embed the GPU, and general rules for the rest (GPU prefixes, kernel names, "dtype dims" prefixes,
the verify and analyze check-id layout, which the result's planned stage and labels replace where set).
"""

from __future__ import annotations

from functools import lru_cache

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from opgate.core.dtypes import KNOWN_DTYPES
from opgate.model.results import CheckResult, Figure, slug

# Doctor figures whose prose names embed the GPU: name (after the "GPUn " prefix) -> stable key.
DOCTOR_FIGURE_KEYS: dict[str, str] = {
    "HBM read (opgate kernel)": "hbm.read_bandwidth",
    "datasheet memory bandwidth": "hbm.datasheet_bandwidth",
    "cudaMemcpy D2D (read+write)": "hbm.memcpy_d2d_bandwidth",
    "PyTorch dst.copy_(src) (read+write)": "hbm.torch_copy_bandwidth",
    "read run-to-run spread (p90-p10)/median": "hbm.read_spread",
    "buffer": "hbm.buffer_size",
    "L2 read (opgate kernel)": "l2.read_bandwidth",
    "HBM read (same kernel family, this run)": "l2.hbm_read_bandwidth",
    "HBM / L2 bandwidth ratio": "l2.hbm_over_l2",
    "L2 size (device attribute)": "l2.size",
    "working set": "l2.working_set",
    "H2D pinned": "host_links.h2d_pinned",
    "D2H pinned": "host_links.d2h_pinned",
    "H2D pageable": "host_links.h2d_pageable",
    "D2H pageable": "host_links.d2h_pageable",
    "both directions at once (pinned, aggregate)": "host_links.bidirectional_aggregate",
    "both at once: H2D share": "host_links.bidirectional_h2d",
    "both at once: D2H share": "host_links.bidirectional_d2h",
    "PCIe theoretical per direction": "host_links.pcie_raw_rate",
    "PCIe link under load": "host_links.pcie_link_under_load",
    "PCIe link max": "host_links.pcie_link_max",
    "PCIe max payload (device control)": "host_links.max_payload",
    "peer copy": "p2p.bandwidth",
    "4-byte copy latency": "p2p.latency",
    "peer access": "p2p.peer_access",
    "name": "gpu.name",
    "compute capability": "gpu.compute_capability",
    "memory": "gpu.memory",
    "GPU temperature (highest)": "clocks.temperature_max",
}

_GPU_PREFIX = re.compile(r"^GPU(?P<gpu>\d+)(?:\s*(?:->|→|-)\s*GPU(?P<peer>\d+))?:?\s+")
_KERNEL_PREFIX = re.compile(r"^(?P<kernel>[A-Za-z_][\w.]*\[[^\]]*\])\s+(?P<rest>.+)$")
_DTYPE_DIMS_PREFIX = re.compile(
    r"^(?P<dtype>float64|float32|float16|bfloat16|float8\w*|int8|int16|int32|int64|uint8|bool)"
    r":?(?:\s+(?P<dims>[A-Za-z_]\w*=\d+(?:,[A-Za-z_]\w*=\d+)*))?:?\s+(?P<rest>.+)$")
_DIRECTION = re.compile(r"^(?P<dir>H2D|D2H) (?P<rest>(?:pinned / that ceiling|ceiling at (?P<payload>\d+)-byte).*)$")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


@dataclass(frozen=True)
class Metric:
    """One figure in schema 2: what a machine compares across runs."""

    key: str
    labels: Mapping[str, str]
    value: float | int | None
    unit: str
    text: str | None  # the figure's own words when it is not a number (or a yes/no)
    kind: str  # "number", "bool", "text" or "none": how the schema-1 value round-trips
    name: str = ""
    threshold: Mapping[str, Any] | None = field(default=None)

    @property
    def identity(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        return self.key, tuple(sorted(self.labels.items()))

    def label_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))


def numeric_value(value: Any) -> tuple[float | int | None, str | None, str]:
    """(number or None, text or None, kind) for a schema-1 figure value; numeric strings become numbers."""
    if value is None:
        return None, "(no value)", "none"
    if isinstance(value, bool):
        return (1.0 if value else 0.0), ("true" if value else "false"), "bool"
    if isinstance(value, int):
        return value, None, "number"
    if isinstance(value, float):
        if not math.isfinite(value):
            return None, repr(value), "nonfinite"  # JSON has no NaN/Inf: explicit text
        return value, None, "number"
    text = str(value)
    stripped = text.strip()
    if stripped in ("nan", "inf", "-inf"):
        return None, stripped, "text"  # not-a-number stays explicit text: JSON has no NaN
    if _NUMBER.match(stripped):
        number = float(stripped)
        if math.isfinite(number):
            return number, text, "numstr"
    return None, text, "text"


# A sanitizer task's id ends in its tool (memcheck's in "sanitizer"): opgate.verify.builtin_stages.SanitizerStage
SANITIZER_TOOL_SUFFIXES = ("racecheck", "initcheck", "synccheck")
# Check-id suffixes of other verbs' stages that verify reports carry (analyze's, through the same labels)
_OTHER_STAGE_SUFFIXES = ("portability", "occupancy", "roofline")


@lru_cache(maxsize=1)
def _stage_suffixes() -> frozenset[str]:
    """The last part of a verify GPU stage's check id: every registered stage's name (shipped and plugins: a
    fixed list here missed `qos`, whose results were keyed as numerics with dtype 'qos')."""
    from opgate.engine.stages import stage_names

    return frozenset(stage_names()) | frozenset(_OTHER_STAGE_SUFFIXES)


def _planned_labels(result: CheckResult) -> tuple[str, dict[str, str]]:
    """The key stem and labels of a result whose task was planned with a stage ("verify.numerics", {"op": ...,
    "impl": ..., "dtype": ...}): no check-id parsing. The dtype and sizes a check reports in `extra` stay labels,
    as the derivation from the check id made them."""
    extra = result.extra if isinstance(result.extra, Mapping) else {}
    labels: dict[str, str] = {}
    if extra.get("dtype"):
        labels["dtype"] = str(extra["dtype"])
    dims = extra.get("dims")
    if isinstance(dims, Mapping) and dims:
        labels["dims"] = ",".join(f"{k}={v}" for k, v in dims.items())
    labels.update(result.labels)
    return f"{result.check_id.split('.', 1)[0]}.{result.stage}", labels


def _check_labels(result: CheckResult) -> tuple[str, dict[str, str]]:
    """The key stem and labels of a check: its planned stage and labels where set, else what its check id carries
    (verify.OP.IMPL.DTYPE, analyze.STAGE.OP.IMPL.TARGET, ...)."""
    if result.stage:
        return _planned_labels(result)
    parts = result.check_id.split(".")
    verb = parts[0]
    extra = result.extra if isinstance(result.extra, Mapping) else {}
    labels: dict[str, str] = {}
    if verb == "inspect":
        binary, _, target = result.check_id[len("inspect."):].rpartition("@")
        labels = {"binary": str(extra.get("binary", binary)), "target": target}
        return "inspect", labels
    if verb == "verify" and len(parts) >= 3:
        op = str(extra.get("op", parts[1]))
        labels["op"] = op
        if parts[-1] == "calibration":
            return "verify.calibration", labels
        impl = extra.get("implementation") or extra.get("impl")
        tail = parts[2:]
        staged_dtype = (len(tail) >= 3 and tail[-2] in KNOWN_DTYPES
                        and (tail[-1] in SANITIZER_TOOL_SUFFIXES or tail[-1] in _stage_suffixes()))
        if not impl:  # verify.OP.IMPL.DTYPE, or verify.OP.IMPL[.DTYPE].STAGE: IMPL may hold dots (torch.compile)
            impl = ".".join(tail[:-2] if staged_dtype else tail[:-1]) if len(tail) > 1 else tail[0]
        if staged_dtype and not extra.get("dtype"):
            labels["dtype"] = tail[-2]
        labels["impl"] = str(impl)
        last = tail[-1]
        stage = "numerics"
        if last in SANITIZER_TOOL_SUFFIXES:
            stage = "sanitizer"  # verify.OP.IMPL.racecheck: the sanitizer stage, its tool in the labels
            labels["tool"] = last
        elif last in _stage_suffixes():
            stage = last
            if last == "sanitizer":
                labels["tool"] = "memcheck"
        elif len(tail) == 1:
            stage = last
        dtype = extra.get("dtype") or (last if stage == "numerics" else None)
        if dtype:
            labels["dtype"] = str(dtype)
        dims = extra.get("dims")
        if isinstance(dims, Mapping) and dims:
            labels["dims"] = ",".join(f"{k}={v}" for k, v in dims.items())
        return f"verify.{stage}", labels
    if verb == "analyze" and len(parts) >= 3:
        stage = parts[1]
        labels["op"] = parts[2]
        if stage in ("portability", "occupancy") and len(parts) >= 5:
            labels["impl"] = ".".join(parts[3:-1])
            labels["target"] = parts[-1]
        elif len(parts) >= 4:
            labels["gpu_model"] = ".".join(parts[3:])
        return f"analyze.{stage}", labels
    if verb == "doctor" and len(parts) >= 2:
        return parts[1], labels
    return ".".join(parts[:2]) if len(parts) > 1 else verb, labels


def check_labels(result: CheckResult) -> tuple[str, dict[str, str]]:
    """The key stem and labels of a whole check, without a figure ("verify.numerics", {"op": ..., "impl": ...,
    "dtype": ...}): the same derivation as every figure's, for readers that group checks (the Markdown summary)."""
    stem, labels = _check_labels(result)
    return stem, dict(labels)


_GENERIC_NAMES = {"name", "memory", "compute capability", "buffer", "working set"}


def _device_labels(result: CheckResult, gpu: str | None) -> dict[str, str]:
    """gpu / uuid / pci_bus_id of the device a figure is about, from the check's evidence: a single-GPU probe
    names no GPU in its figures, but its `extra["gpus"]` says which device it measured."""
    extra = result.extra if isinstance(result.extra, Mapping) else {}
    entries = extra.get("gpus")
    if not isinstance(entries, list) or not entries:
        return {}
    chosen = None
    for entry in entries:
        device = entry.get("device", entry) if isinstance(entry, Mapping) else {}
        index = device.get("index") if isinstance(device, Mapping) else None
        if gpu is None and len(entries) == 1 or (gpu is not None and str(index) == gpu):
            chosen = device
            break
    if not isinstance(chosen, Mapping):
        return {}
    labels = {}
    if chosen.get("index") is not None:
        labels["gpu"] = str(chosen["index"])
    for name in ("uuid", "pci_bus_id"):
        if chosen.get(name):
            labels[name] = str(chosen[name])
    return labels


def metric_for(result: CheckResult, figure: Figure) -> Metric:
    """Schema-2 key, labels and numeric value of one figure of one check: the key and labels set at the source
    where there is one (the result's labels merged with the figure's), else derived (`derived_metric_for`)."""
    if not figure.key:
        return derived_metric_for(result, figure)
    value, text, kind = numeric_value(figure.value)
    return Metric(key=figure.key, labels={**result.labels, **figure.labels}, value=value, unit=figure.unit,
                  text=text, kind=kind, name=figure.name,
                  threshold=figure.threshold.to_dict() if figure.threshold else None)


def derived_metric_for(result: CheckResult, figure: Figure) -> Metric:
    """The key and labels derived from the check id (or the result's planned stage and labels) and the figure's
    prose name, for a figure whose check set no key; what the shipped checks' keys were before they set them."""
    stem, labels = _check_labels(result)
    labels = dict(labels)
    name = figure.name.strip()
    rest = name
    match = _GPU_PREFIX.match(rest)
    if match:
        labels["gpu"] = match.group("gpu")
        if match.group("peer"):
            labels["peer"] = match.group("peer")
        rest = rest[match.end():]
    labels.update(_device_labels(result, labels.get("gpu")))
    match = _KERNEL_PREFIX.match(rest)
    if match:
        labels["kernel"] = match.group("kernel")
        rest = match.group("rest")
    match = _DTYPE_DIMS_PREFIX.match(rest)
    if match and stem.startswith(("analyze", "verify")):
        labels["dtype"] = match.group("dtype")
        if match.group("dims"):
            labels["dims"] = match.group("dims")
        rest = match.group("rest")
    match = _DIRECTION.match(rest)
    if match and stem == "host_links":
        labels["direction"] = match.group("dir")
        rest = match.group("rest")
        if match.group("payload"):
            labels["payload_bytes"] = match.group("payload")
            rest = "packet ceiling"
    if rest in DOCTOR_FIGURE_KEYS and result.check_id.startswith("doctor.") and (
            "gpu" in labels or rest not in _GENERIC_NAMES):
        key = DOCTOR_FIGURE_KEYS[rest]
    else:
        key = f"{stem}.{slug(rest)}"
    labels.update(figure.labels)
    value, text, kind = numeric_value(figure.value)
    return Metric(key=key, labels=labels, value=value, unit=figure.unit, text=text, kind=kind, name=figure.name,
                  threshold=figure.threshold.to_dict() if figure.threshold else None)


def report_metrics(results: Any) -> list[tuple[CheckResult, Metric]]:
    """Every figure of every result as a Metric, in report order."""
    return [(result, metric_for(result, figure)) for result in results for figure in result.figures]
