"""The GPU catalogue: look GPUs up by the names users type, from data/gpus.toml."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from opgate.data import load_table
from opgate.errors import InputError


@dataclass(frozen=True)
class GpuModel:
    key: str
    name: str
    compute_capability: tuple[int, int]
    source: str
    row: Mapping[str, Any]  # the whole catalogue row: datasheet figures live here

    @property
    def sm(self) -> int:
        """Compute capability as the sm_XY number (9.0 -> 90, 12.0 -> 120)."""
        return self.compute_capability[0] * 10 + self.compute_capability[1]


def _normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-").removeprefix("nvidia-")


def _parse_cc(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


def all_gpus() -> list[GpuModel]:
    return [
        GpuModel(row["key"], row["name"], _parse_cc(row["compute_capability"]), row["source"], row)
        for row in load_table("gpus")
    ]


def lookup_gpu(name: str) -> GpuModel:
    """Find a GPU by key, alias or marketing name; InputError listing the known keys otherwise."""
    wanted = _normalize(name)
    for gpu in all_gpus():
        names = {gpu.key, _normalize(gpu.name), *(_normalize(a) for a in gpu.row.get("aliases", []))}
        if wanted in names:
            return gpu
    known = ", ".join(g.key for g in all_gpus())
    raise InputError(f"GPU {name!r} is not in opgate's catalogue; use one of: {known} (or an sm_XY target)")
