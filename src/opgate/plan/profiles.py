"""MIG GPU-instance profiles per GPU model, from data/mig_profiles.toml (NVIDIA's MIG User Guide, row by row).

A GPU model that has no MIG table (L4, L40S, T4, ...) can still be planned as a whole GPU: one instance that
holds the whole card, memory from the GPU catalogue.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

from opgate.data import load_table
from opgate.model.errors import InputError

try:
    import tomllib  # type: ignore[import-not-found]
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

WHOLE_GPU = "whole"  # the pseudo-profile of a GPU used without MIG


@dataclass(frozen=True)
class MigProfile:
    name: str  # "1g.10gb", "1g.10gb+me"
    compute_slices: int
    memory_slices: int  # slots taken on the placement axis
    memory_gb: float
    max_instances: int
    copy_engines: int
    starts: tuple[int, ...]  # legal start slots (nvidia-smi mig -lgipp)
    media_extensions: bool
    placement_uncertain: bool
    source: str
    placement_source: str

    @property
    def size_class(self) -> str:
        """"3g" for "3g.40gb": the compute-slice class DRA/device-plugin names share."""
        return self.name.split(".", 1)[0]


@dataclass(frozen=True)
class GpuSlicing:
    """How one GPU model can be carved: its MIG profiles (empty: whole GPU only) and its limits."""

    key: str  # "h100-80gb", or the catalogue key of a non-MIG GPU ("l4")
    name: str
    memory_gb: float
    compute_slices: int
    memory_slots: int
    max_instances: int
    profiles: tuple[MigProfile, ...]

    @property
    def mig_capable(self) -> bool:
        return bool(self.profiles)

    def profile(self, name: str) -> MigProfile:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        names = ", ".join(p.name for p in self.profiles) or "none (not MIG-capable)"
        raise InputError(f"MIG profile {name!r} does not exist on {self.key}; its profiles: {names}")


@functools.lru_cache(maxsize=None)
def _raw_table() -> dict:
    text = resources.files("opgate.data").joinpath("mig_profiles.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


@functools.lru_cache(maxsize=None)
def mig_models() -> dict[str, GpuSlicing]:
    raw = _raw_table()
    placements: dict[str, str] = raw.get("placements", {})
    by_gpu: dict[str, list[MigProfile]] = {}
    for row in load_table("mig_profiles"):
        by_gpu.setdefault(row["gpu"], []).append(MigProfile(
            name=row["profile"], compute_slices=int(row["compute_slices"]), memory_slices=int(row["memory_slices"]),
            memory_gb=float(row["memory_gb"]), max_instances=int(row["max_instances"]),
            copy_engines=int(row["copy_engines"]), starts=tuple(int(s) for s in row["starts"]),
            media_extensions=bool(row.get("media_extensions", False)),
            placement_uncertain=bool(row.get("placement_uncertain", False)), source=row["source"],
            placement_source=placements.get(row["placement_source"], row["placement_source"]),
        ))
    models = {}
    for key, limits in raw["gpus"].items():
        models[key] = GpuSlicing(
            key=key, name=key, memory_gb=float(limits["memory_gb"]), compute_slices=int(limits["compute_slices"]),
            memory_slots=int(limits["memory_slots"]), max_instances=int(limits["max_instances"]),
            profiles=tuple(by_gpu.get(key, ())),
        )
    return models


@functools.lru_cache(maxsize=None)
def _catalogue_aliases() -> dict[str, str]:
    return {alias: key for key, limits in _raw_table()["gpus"].items() for alias in limits.get("catalogue", ())}


def slicing_for(model: str) -> GpuSlicing:
    """The slicing of a GPU model named as the user types it: a MIG table key ("h100-80gb"), or a GPU catalogue
    name ("h100", "NVIDIA H200", "l4"); a catalogue GPU without a MIG table is whole-GPU only."""
    from opgate.core.gpus import lookup_gpu

    text = model.strip().lower()
    models = mig_models()
    if text in models:
        return models[text]
    gpu = lookup_gpu(model)  # InputError naming the catalogue when unknown
    key = _catalogue_aliases().get(gpu.key)
    if key is not None:
        return models[key]
    return GpuSlicing(key=gpu.key, name=gpu.name, memory_gb=gpu.memory_gb, compute_slices=1, memory_slots=1,
                      max_instances=1, profiles=())
