"""NVLink state per GPU from NVML (active links, NVML's version code, links into an NVSwitch) and each GPU's PCIe
link, beside the GPU-GPU link matrix of `opgate.probes.topology`. A plain snapshot: the collectives and link
matrix judges read it, and recorded snapshots (tests/data/multigpu/) test them without a GPU.

NVML's NVLink version is kept as the raw `nvmlNvlinkVersion_t` code and not trusted for the generation: some
drivers report NVML_NVLINK_VERSION_5_0 on Hopper (NVLink 4). The generation and link count of a model come from
data/nvlink_bandwidth.toml; NVML says how many links are active now.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from opgate.probes.topology import NVLINK_DEVICE_TYPE_SWITCH, NVLINK_MAX_LINKS  # NVML's constants, defined once


@dataclass(frozen=True)
class GpuLinks:
    index: int
    name: str
    active_nvlinks: int
    nvlinks_to_switch: int
    nvml_versions: tuple[int, ...]  # distinct nvmlNvlinkVersion_t codes of the active links
    pcie_max_generation: int | None
    pcie_max_width: int | None
    pcie_generation: int | None  # current (an idle GPU trains its link down; the max is the reference)
    pcie_width: int | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class LinkSnapshot:
    gpus: tuple[GpuLinks, ...]
    links: tuple[tuple[str, ...], ...]  # nvidia-smi topo classes, GPU x GPU (opgate.probes.topology)
    numa: tuple[int, ...] = ()  # NUMA node per GPU, -1 unknown

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "LinkSnapshot":
        gpus = tuple(GpuLinks(**{**g, "nvml_versions": tuple(g.get("nvml_versions", ())),
                                 "notes": tuple(g.get("notes", ()))}) for g in data["gpus"])
        return cls(gpus, tuple(tuple(row) for row in data["links"]), tuple(data.get("numa", ())))

    def all_pairs_nvlink(self) -> bool:
        n = len(self.links)
        return n > 1 and all(self.links[i][j].startswith("NV") for i in range(n) for j in range(n) if i != j)


def collect_links() -> LinkSnapshot:
    """The live snapshot; NvmlUnavailable (opgate.probes.nvml) when there is no driver."""
    from opgate.probes.nvml import is_available, nvml_session, query
    from opgate.probes.topology import collect_topology

    topology = collect_topology()
    gpus = []
    with nvml_session() as nv:
        for place in topology.gpus:
            handle = nv.nvmlDeviceGetHandleByIndex(place.index)
            active = to_switch = 0
            versions: set[int] = set()
            notes = []
            for link in range(NVLINK_MAX_LINKS):
                state = query(nv.nvmlDeviceGetNvLinkState, handle, link)
                if not is_available(state):
                    if link == 0:
                        notes.append(f"NVLink state not readable: {state.reason}")
                    break
                if not state:
                    continue
                active += 1
                version = query(nv.nvmlDeviceGetNvLinkVersion, handle, link)
                if is_available(version):
                    versions.add(int(version))
                kind = query(nv.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
                if is_available(kind) and int(kind) == NVLINK_DEVICE_TYPE_SWITCH:
                    to_switch += 1

            def number(fn_name: str) -> int | None:
                fn = getattr(nv, fn_name, None)
                value = query(fn, handle) if fn is not None else None
                return int(value) if value is not None and is_available(value) else None

            gpus.append(GpuLinks(place.index, place.name, active, to_switch, tuple(sorted(versions)),
                                 number("nvmlDeviceGetMaxPcieLinkGeneration"), number("nvmlDeviceGetMaxPcieLinkWidth"),
                                 number("nvmlDeviceGetCurrPcieLinkGeneration"), number("nvmlDeviceGetCurrPcieLinkWidth"),
                                 tuple(notes)))
    return LinkSnapshot(tuple(gpus), topology.links, tuple(g.numa_node for g in topology.gpus))
