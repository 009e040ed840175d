"""Topology facts: GPU <-> NUMA node <-> NIC affinity and the GPU-GPU link matrix, from NVML and /sys.

Plain snapshot (collect), judged by `opgate.doctor.topology` (analyze) and read by `opgate plan` (through
`extra.topology` of the doctor report). Link classes use `nvidia-smi topo -m`'s vocabulary:
NV# (# NVLinks, direct or through NVSwitch), PIX (one PCIe switch), PXB (several PCIe switches), PHB (the same
PCIe host bridge), NODE (host bridges of one NUMA node), SYS (across the CPU interconnect).
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

# NVML topology levels (nvmlGpuTopologyLevel_t, NVML API Reference) -> nvidia-smi topo names
NVML_LEVEL_NAMES = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS
NVLINK_DEVICE_TYPE_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH


@dataclass(frozen=True)
class GpuPlace:
    index: int
    name: str
    bus_id: str  # sysfs form, 0000:18:00.0
    numa_node: int  # -1: the platform does not say
    local_cpus: str
    pci_path: tuple[str, ...]  # PCI devices from the root port down to the GPU


@dataclass(frozen=True)
class NicPlace:
    name: str  # mlx5_0 or eth0
    kind: str  # infiniband | net
    bus_id: str
    numa_node: int
    pci_path: tuple[str, ...]


@dataclass(frozen=True)
class TopologySnapshot:
    hostname: str
    numa_nodes: int
    gpus: tuple[GpuPlace, ...]
    nics: tuple[NicPlace, ...]
    links: tuple[tuple[str, ...], ...]  # GPU x GPU
    gpu_nic: tuple[tuple[str, ...], ...] = ()  # GPU x NIC
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        # the planner's view (opgate.plan.mig_solver.link_is_poor / nic_local)
        data["gpu_numa"] = [g.numa_node for g in self.gpus]
        data["nic_numa"] = sorted({n.numa_node for n in self.nics if n.numa_node >= 0})
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TopologySnapshot":
        return cls(
            hostname=data["hostname"], numa_nodes=int(data["numa_nodes"]),
            gpus=tuple(GpuPlace(**{**g, "pci_path": tuple(g["pci_path"])}) for g in data["gpus"]),
            nics=tuple(NicPlace(**{**n, "pci_path": tuple(n["pci_path"])}) for n in data["nics"]),
            links=tuple(tuple(row) for row in data["links"]),
            gpu_nic=tuple(tuple(row) for row in data.get("gpu_nic", ())),
            notes=tuple(data.get("notes", ())),
        )


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's 00000000:18:00.0 -> sysfs 0000:18:00.0 (lower case)."""
    text = nvml_bus_id.strip().lower()
    domain, _, rest = text.partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else text


def _read_int(path: Path, default: int = -1) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return default


def pci_path(sys_root: Path, bus_id: str) -> tuple[str, ...]:
    """PCI devices from the root complex down to `bus_id` (from the resolved /sys/bus/pci/devices link)."""
    link = sys_root / "bus" / "pci" / "devices" / bus_id
    try:
        resolved = Path(os.path.realpath(link))
    except OSError:
        return (bus_id,)
    parts = [p for p in resolved.parts if ":" in p and "." in p]
    return tuple(parts) or (bus_id,)


def count_numa_nodes(sys_root: Path) -> int:
    nodes = sys_root / "devices" / "system" / "node"
    if not nodes.is_dir():
        return 1
    return max(1, sum(1 for p in nodes.iterdir() if p.name.startswith("node") and p.name[4:].isdigit()))


def read_nics(sys_root: Path) -> list[NicPlace]:
    """Physical NICs: InfiniBand/RoCE devices, and network interfaces backed by a PCI device."""
    found: list[NicPlace] = []
    seen: set[str] = set()
    for kind, folder in (("infiniband", sys_root / "class" / "infiniband"), ("net", sys_root / "class" / "net")):
        if not folder.is_dir():
            continue
        for entry in sorted(folder.iterdir()):
            device = entry / "device"
            if not device.exists():
                continue  # virtual interface (lo, veth, bridges)
            resolved = Path(os.path.realpath(device))
            bus_id = resolved.name
            if ":" not in bus_id or bus_id in seen:
                continue
            seen.add(bus_id)
            found.append(NicPlace(entry.name, kind, bus_id, _read_int(device / "numa_node"),
                                  pci_path(sys_root, bus_id)))
    return found


def pci_link_class(a: Sequence[str], b: Sequence[str], numa_a: int, numa_b: int) -> str:
    """nvidia-smi topo's PCIe classes from two devices' PCI paths and NUMA nodes."""
    common = 0
    for x, y in zip(a, b):
        if x != y:
            break
        common += 1
    if common == 0:  # different root ports / host bridges
        return "NODE" if numa_a == numa_b and numa_a >= 0 else "SYS"
    below_root = common - 1  # devices shared below the root port: PCIe switches
    if below_root <= 0:
        return "PHB"
    return "PIX" if below_root == 1 else "PXB"


def _nvlink_matrix(nv: Any, handles: list[Any], bus_ids: list[str]) -> list[list[int]]:
    """Active NVLinks between GPU pairs; links into an NVSwitch connect every GPU that has them."""
    from opgate.probes.nvml import is_available, query

    count = len(handles)
    direct = [[0] * count for _ in range(count)]
    switch_links = [0] * count
    for i, handle in enumerate(handles):
        for link in range(NVLINK_MAX_LINKS):
            state = query(nv.nvmlDeviceGetNvLinkState, handle, link)
            if not is_available(state) or not state:
                continue
            kind = query(nv.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
            if is_available(kind) and int(kind) == NVLINK_DEVICE_TYPE_SWITCH:
                switch_links[i] += 1
                continue
            remote = query(nv.nvmlDeviceGetNvLinkRemotePciInfo_v2, handle, link)
            if not is_available(remote):
                remote = query(nv.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            if is_available(remote):
                peer = sysfs_bus_id(_text(remote.busId))
                if peer in bus_ids:
                    direct[i][bus_ids.index(peer)] += 1
    for i in range(count):
        for j in range(count):
            if i != j and switch_links[i] and switch_links[j]:
                direct[i][j] = max(direct[i][j], min(switch_links[i], switch_links[j]))
    return direct


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def collect_topology(sys_root: Path = Path("/sys")) -> TopologySnapshot:
    """The live snapshot: NVML for the GPUs and their links, /sys for NUMA nodes and NICs."""
    from opgate.probes.nvml import is_available, nvml_session, query

    notes: list[str] = []
    gpus: list[GpuPlace] = []
    links: list[list[str]] = []
    with nvml_session() as nv:
        count = query(nv.nvmlDeviceGetCount)
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count if is_available(count) else 0)]
        bus_ids = []
        for index, handle in enumerate(handles):
            pci = query(nv.nvmlDeviceGetPciInfo, handle)
            bus_id = sysfs_bus_id(_text(pci.busId)) if is_available(pci) else f"unknown-{index}"
            bus_ids.append(bus_id)
            device = sys_root / "bus" / "pci" / "devices" / bus_id
            try:
                cpus = (device / "local_cpulist").read_text().strip()
            except OSError:
                cpus = ""
            name = query(nv.nvmlDeviceGetName, handle)
            gpus.append(GpuPlace(index, str(name), bus_id, _read_int(device / "numa_node"), cpus,
                                 pci_path(sys_root, bus_id)))
        nvlinks = _nvlink_matrix(nv, handles, bus_ids) if len(handles) > 1 else [[0]]
        for i, a in enumerate(handles):
            row = []
            for j, b in enumerate(handles):
                if i == j:
                    row.append("X")
                elif nvlinks[i][j]:
                    row.append(f"NV{nvlinks[i][j]}")
                else:
                    level = query(nv.nvmlDeviceGetTopologyCommonAncestor, a, b)
                    row.append(NVML_LEVEL_NAMES.get(int(level), str(level)) if is_available(level) else
                               pci_link_class(gpus[i].pci_path, gpus[j].pci_path, gpus[i].numa_node,
                                              gpus[j].numa_node))
            links.append(row)
    nics = read_nics(sys_root)
    if not nics:
        notes.append("no PCI-backed network interface or InfiniBand device under /sys/class")
    gpu_nic = [[pci_link_class(g.pci_path, n.pci_path, g.numa_node, n.numa_node) for n in nics] for g in gpus]
    return TopologySnapshot(socket.gethostname(), count_numa_nodes(sys_root), tuple(gpus), tuple(nics),
                            tuple(tuple(r) for r in links), tuple(tuple(r) for r in gpu_nic), tuple(notes))
