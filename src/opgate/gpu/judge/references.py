"""What the measured probes are judged against: datasheet peaks and per-model pass/warn bands.

Datasheet memory bandwidth comes from the GPU catalogue (`opgate.core.gpus`, data/gpus.toml) when its row
carries one, else from data/gpu_probe_thresholds.toml; bands come from data/gpu_probe_policy.toml.
Everything here is pure lookup, testable without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from opgate.data import load_table

# Keys a catalogue row may use for the datasheet bandwidth (another change is adding them; read defensively).
_CATALOGUE_BANDWIDTH_KEYS = ("memory_bandwidth_gbs", "memory_bandwidth_gb_s", "mem_bandwidth_gbs",
                             "hbm_bandwidth_gbs")


def normalize_gpu_name(name: str) -> str:
    return " ".join(name.strip().lower().replace("_", " ").replace("-", " ").split())


@dataclass(frozen=True)
class DatasheetBandwidth:
    gpu_key: str
    gbs: float
    source: str
    uncertain: bool
    origin: str  # "catalogue" (data/gpus.toml) or "probe table" (data/gpu_probe_thresholds.toml)

    @property
    def tbs(self) -> float:
        return self.gbs / 1000.0


def _probe_table_row(device_name: str) -> dict | None:
    wanted = normalize_gpu_name(device_name)
    for row in load_table("gpu_probe_thresholds"):
        names = {normalize_gpu_name(n) for n in row.get("device_names", [])}
        names.add(normalize_gpu_name(row["key"]))
        if wanted in names:
            return row
    return None


def gpu_key_for(device_name: str) -> str | None:
    """opgate's key ("h200") for a device name as CUDA/NVML report it ("NVIDIA H200"), or None."""
    row = _probe_table_row(device_name)
    if row is not None:
        return str(row["key"])
    catalogue = _catalogue_row(device_name)
    return str(catalogue["key"]) if catalogue else None


def _catalogue_row(device_name: str) -> dict | None:
    try:
        from opgate.core.gpus import lookup_gpu
    except ImportError:  # pragma: no cover - the catalogue ships with opgate
        return None
    candidates = [device_name]
    probe_row = _probe_table_row(device_name)
    if probe_row is not None:
        candidates.insert(0, str(probe_row["key"]))
    for candidate in candidates:
        try:
            return dict(lookup_gpu(candidate).row)
        except Exception:  # InputError: not in the catalogue under that name
            continue
    return None


def datasheet_bandwidth(device_name: str) -> DatasheetBandwidth | None:
    """The datasheet memory bandwidth of the GPU called `device_name`, or None when opgate has none."""
    catalogue = _catalogue_row(device_name)
    if catalogue:
        for key in _CATALOGUE_BANDWIDTH_KEYS:
            value = catalogue.get(key)
            if isinstance(value, (int, float)) and value > 0:
                source = str(catalogue.get(f"{key}_source") or catalogue.get("bandwidth_source")
                             or catalogue.get("source", "data/gpus.toml"))
                return DatasheetBandwidth(str(catalogue["key"]), float(value), source,
                                          bool(catalogue.get("uncertain", False)), "catalogue")
    row = _probe_table_row(device_name)
    if row is None:
        return None
    return DatasheetBandwidth(str(row["key"]), float(row["memory_bandwidth_gbs"]), str(row["source"]),
                              bool(row.get("uncertain", False)), "probe table")


@dataclass(frozen=True)
class Band:
    """Pass/warn band of one metric for one GPU model, with the reason those numbers were chosen."""

    metric: str
    gpu: str  # the model key the row is for, or "default"
    comparison: str  # ">=" higher is better, "<=" lower is better
    pass_at: float
    warn_at: float
    unit: str
    source: str
    uncertain: bool = False


def policy_band(metric: str, gpu_key: str | None) -> Band:
    """The band for `metric` on the model `gpu_key`, falling back to the default row.

    KeyError names the metric when neither exists: that is an opgate bug (a check asks for a metric the
    policy table lacks), caught by the tests.
    """
    default: Band | None = None
    for row in load_table("gpu_probe_policy"):
        if row["metric"] != metric:
            continue
        band = Band(metric, str(row["gpu"]), str(row["comparison"]), float(row["pass_at"]),
                    float(row["warn_at"]), str(row.get("unit", "")), str(row["source"]),
                    bool(row.get("uncertain", False)))
        if gpu_key is not None and row["gpu"] == gpu_key:
            return band
        if row["gpu"] == "default":
            default = band
    if default is None:
        raise KeyError(f"data/gpu_probe_policy.toml has no default row for metric {metric!r}")
    return default


def has_model_band(metric: str, gpu_key: str | None) -> bool:
    """True when the policy table has a row for this metric and this very model (not the default)."""
    return gpu_key is not None and any(
        row["metric"] == metric and row["gpu"] == gpu_key for row in load_table("gpu_probe_policy"))
