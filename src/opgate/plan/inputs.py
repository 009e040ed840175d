"""Planner inputs: the workload file and the fleet file (TOML or YAML), read into frozen dataclasses.

Workload file::

    [[workload]]
    name = "chat-7b"           # unique
    memory_gb = 14             # device memory one replica needs
    replicas = 2
    min_compute_slices = 1     # MIG: smallest compute share (1g = 1/7 of the SMs on A100/H100/H200/B200)
    compute_percent = 30       # MPS: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE one replica needs
    throughput = { "1g" = 9.0, "2g" = 19.0 }   # measured req/s of one replica per profile class (optional)
    min_throughput = 15        # a profile qualifies only when its measured throughput reaches this
    latency_slo_ms = 250       # carried into the report and the emitted configs
    isolation = "mig"          # mig (own GPU instance or whole GPU) | mps (an MPS share) | any
    priority = 1               # larger = placed first when not everything fits
    group = "pipeline-a"       # co-scheduled jobs that exchange data: one node, well-linked GPUs
    models = ["h100", "h200"]  # optional: only these GPU models

Fleet file::

    [[gpu]]
    model = "h100"   # MIG table key or GPU catalogue name
    count = 8
    node = "node-a"  # optional; GPUs of one node share its topology
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from opgate.model.errors import InputError
from opgate.plan.profiles import GpuSlicing, slicing_for

ISOLATION_KINDS = ("mig", "mps", "any")


@dataclass(frozen=True)
class Workload:
    name: str
    memory_gb: float
    replicas: int = 1
    min_compute_slices: int = 1
    compute_percent: int = 0
    throughput: Mapping[str, float] = field(default_factory=dict)
    min_throughput: float = 0.0
    latency_slo_ms: float | None = None
    isolation: str = "mig"
    priority: int = 1
    group: str = ""
    models: tuple[str, ...] = ()


@dataclass(frozen=True)
class FleetGpu:
    """One physical GPU of the fleet."""

    gpu_id: str  # "node-a/3"
    node: str
    index: int  # index on its node
    slicing: GpuSlicing


@dataclass(frozen=True)
class Fleet:
    gpus: tuple[FleetGpu, ...]

    def by_model(self) -> dict[str, list[FleetGpu]]:
        groups: dict[str, list[FleetGpu]] = {}
        for gpu in self.gpus:
            groups.setdefault(gpu.slicing.key, []).append(gpu)
        return groups

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(g.node for g in self.gpus))


def read_text_input(path: Path, what: str) -> str:
    """A text input's contents; InputError (one line naming it) when it is missing, unreadable or not UTF-8 text
    (a binary given by mistake was a UnicodeDecodeError traceback)."""
    if not path.is_file():
        raise InputError(f"{path} does not exist; pass {what}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text (a binary?); pass {what}") from None
    except OSError as exc:
        raise InputError(f"{path} cannot be read ({exc.strerror or exc}); pass {what}") from None


def read_document(path: Path) -> dict[str, Any]:
    """A TOML (.toml) or YAML (.yaml/.yml) file as a dict; InputError when it cannot be read."""
    text = read_text_input(path, "a TOML or YAML file")
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            try:
                import tomllib  # type: ignore[import-not-found]
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            data = tomllib.loads(text)
    except Exception as exc:  # a parse error of the user's file, in one line
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{path} could not be parsed ({first}); fix the syntax") from None
    if not isinstance(data, dict):
        raise InputError(f"{path} must hold a table/mapping at the top level, not {type(data).__name__}")
    return data


def _number(entry: Mapping[str, Any], key: str, where: str, default: Any = None, minimum: float = 0.0,
            integer: bool = False) -> Any:
    value = entry.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: {key} = {value!r} is not a number; give e.g. {key} = {default or 1}")
    if not math.isfinite(value):  # TOML's nan and inf are floats: a NaN compares false with every limit
        raise InputError(f"{where}: {key} = {value} is not a finite number; give e.g. {key} = {default or 1}")
    if value < minimum:
        raise InputError(f"{where}: {key} = {value} is below {minimum}; give a value >= {minimum}")
    if integer and int(value) != value:
        raise InputError(f"{where}: {key} = {value} must be a whole number")
    return int(value) if integer else float(value)


def parse_workloads(data: Mapping[str, Any], origin: str = "workload file") -> tuple[Workload, ...]:
    entries = data.get("workload", data.get("workloads"))
    if not isinstance(entries, list) or not entries:
        raise InputError(f"{origin} has no [[workload]] entries; add at least one with name and memory_gb")
    workloads = []
    seen: set[str] = set()
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise InputError(f"{origin}: workload #{position + 1} is not a table")
        name = str(entry.get("name", "")).strip()
        where = f"{origin}: workload {name or '#' + str(position + 1)}"
        if not name:
            raise InputError(f"{where} has no name; give each workload a unique name")
        if name in seen:
            raise InputError(f"{where}: the name is used twice; names must be unique")
        seen.add(name)
        if "memory_gb" not in entry:
            raise InputError(f"{where} has no memory_gb; give the device memory one replica needs")
        isolation = str(entry.get("isolation", "mig"))
        if isolation not in ISOLATION_KINDS:
            raise InputError(f"{where}: isolation = {isolation!r}; choose from {', '.join(ISOLATION_KINDS)}")
        throughput = entry.get("throughput", {}) or {}
        if not isinstance(throughput, dict) or any(
                isinstance(v, bool) or not isinstance(v, (int, float)) for v in throughput.values()):
            raise InputError(f"{where}: throughput must map profile classes to req/s, e.g. {{\"1g\" = 9.0}}")
        percent = _number(entry, "compute_percent", where, 0, integer=True)
        if percent > 100:
            raise InputError(f"{where}: compute_percent = {percent} is above 100; give a share of the GPU's SMs")
        models = entry.get("models", ())
        if isinstance(models, str):
            models = (models,)
        workloads.append(Workload(
            name=name, memory_gb=_number(entry, "memory_gb", where, minimum=0.001),
            replicas=_number(entry, "replicas", where, 1, minimum=1, integer=True),
            min_compute_slices=_number(entry, "min_compute_slices", where, 1, minimum=1, integer=True),
            compute_percent=percent, throughput={str(k): float(v) for k, v in throughput.items()},
            min_throughput=_number(entry, "min_throughput", where, 0.0),
            latency_slo_ms=_number(entry, "latency_slo_ms", where, None, minimum=0.0),
            isolation=isolation, priority=_number(entry, "priority", where, 1, minimum=1, integer=True),
            group=str(entry.get("group", "") or ""),
            models=tuple(slicing_for(str(m)).key for m in models),
        ))
    return tuple(workloads)


def parse_fleet(data: Mapping[str, Any], origin: str = "fleet file") -> Fleet:
    entries = data.get("gpu", data.get("gpus"))
    if not isinstance(entries, list) or not entries:
        raise InputError(f"{origin} has no [[gpu]] entries; add e.g. model = \"h100\", count = 8")
    gpus: list[FleetGpu] = []
    per_node: dict[str, int] = {}
    for position, entry in enumerate(entries):
        where = f"{origin}: gpu entry #{position + 1}"
        if not isinstance(entry, dict) or "model" not in entry:
            raise InputError(f"{where} has no model; give e.g. model = \"h100\"")
        slicing = slicing_for(str(entry["model"]))
        count = _number(entry, "count", where, 1, minimum=1, integer=True)
        node = str(entry.get("node", "") or f"pool-{slicing.key}")
        for _ in range(count):
            index = per_node.get(node, 0)
            per_node[node] = index + 1
            gpus.append(FleetGpu(gpu_id=f"{node}/{index}", node=node, index=index, slicing=slicing))
    return Fleet(tuple(gpus))


def load_workloads(path: Path) -> tuple[Workload, ...]:
    return parse_workloads(read_document(path), str(path))


# NVML device names (nvmlDeviceGetName, as `opgate doctor` records them) -> GPU catalogue keys, most specific first
NVML_NAME_HINTS = (("H200", "h200"), ("H100", "h100"), ("A100", "a100"), ("B200", "b200"), ("L40S", "l40s"),
                   ("A30", "a30"), ("L4", "l4"), ("A10", "a10"), ("T4", "t4"))


def model_from_nvml_name(name: str) -> str:
    """The catalogue key for an NVML device name ("NVIDIA A100-SXM4-40GB" -> "a100-40gb")."""
    upper = name.upper().replace("NVIDIA", "").strip()
    for hint, key in NVML_NAME_HINTS:
        if hint in upper.replace("-", " ").split() or upper.startswith(hint) or f" {hint}" in f" {upper}":
            if key == "a100" and "40GB" in upper:
                return "a100-40gb"
            return key
    return name


def parse_doctor_reports(data: Any, origin: str) -> Fleet:
    """A fleet from `opgate doctor --json` reports (one, or a list): each report's GPUs (doctor.gpu_inventory's
    extra.gpus) on a node named after the report's host."""
    reports = data if isinstance(data, list) else [data]
    entries = []
    for report in reports:
        node = str(report.get("host", {}).get("hostname") or "localhost")
        inventory = next((r for r in report.get("results", []) if r.get("check_id") == "doctor.gpu_inventory"), None)
        gpus = (inventory or {}).get("extra", {}).get("gpus", [])
        if not gpus:
            raise InputError(f"{origin}: the report of {node} has no doctor.gpu_inventory GPUs; run `opgate doctor "
                             "--json FILE` on a GPU host")
        for gpu in gpus:
            entries.append({"model": model_from_nvml_name(str(gpu.get("name", ""))), "count": 1, "node": node})
    return parse_fleet({"gpu": entries}, origin)


def load_fleet(path: Path) -> Fleet:
    """A fleet file (TOML/YAML [[gpu]] entries), or doctor JSON report(s) (.json)."""
    if path.suffix.lower() == ".json":
        import json

        text = read_text_input(path, "a fleet file or an `opgate doctor --json` report")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path} is not JSON ({exc.msg} at line {exc.lineno})") from None
        return parse_doctor_reports(data, str(path))
    return parse_fleet(read_document(path), str(path))
