"""Stable figure keys for the fleet: one function turns (check result, figure) into a key plus a GPU label.

The key is report schema 2's (`opgate.reporting.metrics.metric_for`: "hbm.read_bandwidth" for the doctor's
"GPU3 HBM read (opgate kernel)"), so the baseline, the exporter and `--json` reports name a figure alike. Labels
that say *which device* (gpu, peer, uuid, pci_bus_id) become `gpu`; any other label (a copy's direction, a
kernel, a dtype) stays part of the identity, written after the key as `{name=value,...}`.
"""

from __future__ import annotations

from dataclasses import dataclass

from opgate.reporting.metrics import metric_for
from opgate.model.results import CheckResult, Figure

DEVICE_LABELS = ("gpu", "peer", "uuid", "pci_bus_id")


@dataclass(frozen=True)
class FigureKey:
    """`key` is the metric identity across hosts; `gpu` the index ("" = the host as a whole, "0-1" a GPU pair);
    `name` the figure's prose name without its "GPUn " prefix."""

    key: str
    gpu: str
    name: str


def figure_key(result: CheckResult, figure: Figure) -> FigureKey:
    """(doctor.hbm_bandwidth, "GPU3 HBM read (opgate kernel)") -> key "hbm.read_bandwidth", gpu "3"."""
    metric = metric_for(result, figure)
    identity = {k: v for k, v in sorted(metric.labels.items()) if k not in DEVICE_LABELS}
    key = metric.key + ("{" + ",".join(f"{k}={v}" for k, v in identity.items()) + "}" if identity else "")
    gpu = metric.labels.get("gpu", "")
    if gpu and metric.labels.get("peer"):
        gpu = f"{gpu}-{metric.labels['peer']}"
    name = figure.name
    if metric.labels.get("gpu") and name.startswith(f"GPU{metric.labels['gpu']}") and " " in name:
        name = name.split(" ", 1)[1]
    return FigureKey(key=key, gpu=gpu, name=name)
