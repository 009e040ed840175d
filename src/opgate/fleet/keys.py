"""Stable figure keys: one function turns (check id, figure name) into a key plus a GPU label.

The reports issue (#16) will add schema-2 keys; until then every fleet consumer (baseline, exporter)
calls `figure_key` only, so swapping the scheme is a one-function change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Figure names carry the GPU as a prefix: "GPU3 HBM read (opgate kernel)" (probes, multi-GPU hosts),
# "GPU0 compute capability" (inventory). A pair "GPU0->GPU1 ..." (peer-to-peer) keeps the pair as label.
_GPU_PREFIX = re.compile(r"^GPU(?P<gpu>\d+(?:->GPU\d+)?)\s+")
_NON_WORD = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class FigureKey:
    """`key` is the metric identity across hosts; `gpu` the index ("" = the host as a whole)."""

    key: str
    gpu: str


def slug(text: str) -> str:
    return _NON_WORD.sub("_", text.lower()).strip("_")


def figure_key(check_id: str, figure_name: str) -> FigureKey:
    """("doctor.hbm_bandwidth", "GPU3 HBM read (opgate kernel)") -> key
    "doctor.hbm_bandwidth.hbm_read_opgate_kernel", gpu "3"."""
    match = _GPU_PREFIX.match(figure_name)
    gpu = ""
    if match:
        gpu = match.group("gpu").replace("->GPU", "-")
        figure_name = figure_name[match.end():]
    return FigureKey(key=f"{check_id}.{slug(figure_name)}", gpu=gpu)
