"""The GPU catalogue: look GPUs up by the names users type, from data/gpus.toml."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from opgate.data import load_table
from opgate.model.errors import InputError


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

    @property
    def cc_text(self) -> str:
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    # -- datasheet figures (see the header of data/gpus.toml for units and conventions) --------
    @property
    def sm_count(self) -> int:
        return int(self.row["sm_count"])

    @property
    def memory_gb(self) -> float:
        return float(self.row["memory_gb"])

    @property
    def memory_bandwidth_gbs(self) -> float:
        return float(self.row["memory_bandwidth_gbs"])

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """DRAM bandwidth in bytes/s (datasheet GB/s are decimal: 1 GB/s = 1e9 B/s)."""
        return self.memory_bandwidth_gbs * 1e9

    @property
    def l2_mb(self) -> float:
        return float(self.row["l2_mb"])

    @property
    def boost_clock_mhz(self) -> float:
        return float(self.row["boost_clock_mhz"])

    @property
    def pcie(self) -> str:
        """e.g. "Gen5 x16"."""
        return f"Gen{self.row['pcie_gen']} x{self.row['pcie_lanes']}"

    @property
    def nvlink_gbs(self) -> float:
        """Total bidirectional NVLink bandwidth per GPU in GB/s; 0 when the GPU has none."""
        return float(self.row.get("nvlink_gbs", 0))

    @property
    def precisions(self) -> tuple[str, ...]:
        """Precisions with a dense peak in the catalogue, e.g. ("fp64", "fp32", "tf32", ...)."""
        return tuple(self.row.get("dense_tflops", {}))

    def peak_tflops(self, precision: str) -> float | None:
        """Dense peak in TFLOP/s (TOPS for int8); None when the GPU has no unit or no figure for it."""
        if precision not in PRECISIONS:
            raise InputError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
        value = self.row.get("dense_tflops", {}).get(precision)
        return None if value is None else float(value)

    def peak_ops_per_s(self, precision: str) -> float | None:
        """Dense peak in FLOP/s (OP/s for int8)."""
        tflops = self.peak_tflops(precision)
        return None if tflops is None else tflops * 1e12

    @property
    def uncertain_fields(self) -> tuple[str, ...]:
        """Fields the source table marks uncertain ([U]): secondary, derived or disputed figures."""
        return tuple(self.row.get("uncertain_fields", ()))

    @property
    def uncertain(self) -> bool:
        return bool(self.row.get("uncertain", False))


# Dense-peak keys of `dense_tflops` in data/gpus.toml. fp64_tc is the FP64 tensor-core (DMMA) rate.
PRECISIONS = ("fp64", "fp64_tc", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")


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


def _key_for_device_name(name: str) -> str | None:
    """opgate's key for a board as the driver names it (cudaGetDeviceProperties, nvidia-smi), from the device names
    of data/gpu_probe_thresholds.toml: the H100 SXM5 calls itself "NVIDIA H100 80GB HBM3", which no catalogue name
    or alias matched, so a runtime check on an H100 had no roofline (thirty-seventh session)."""
    wanted = _normalize(name)
    for row in load_table("gpu_probe_thresholds"):
        if wanted in {_normalize(n) for n in row.get("device_names", [])}:
            return str(row["key"])
    return None


def lookup_gpu(name: str) -> GpuModel:
    """Find a GPU by key, alias, marketing name or the name its driver reports; InputError listing the known keys
    otherwise."""
    wanted = _normalize(name)
    device_key = _key_for_device_name(name)
    for gpu in all_gpus():
        names = {gpu.key, _normalize(gpu.name), *(_normalize(a) for a in gpu.row.get("aliases", []))}
        if wanted in names:
            return gpu
    for gpu in all_gpus():
        if gpu.key == device_key:
            return gpu
    known = ", ".join(g.key for g in all_gpus())
    raise InputError(f"GPU {name!r} is not in opgate's catalogue; use one of: {known} (or an sm_XY target)")
