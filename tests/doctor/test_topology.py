"""Topology facts: the /sys reader on a sysfs tree laid out like a real one, the link classes, the judgement on
snapshots, and the planner's use of them."""

from __future__ import annotations

import os
from pathlib import Path

from opgate.gpu.judge.topology import judge_topology
from opgate.plan.mig_solver import link_is_poor, nic_local
from opgate.probes.topology import (GpuPlace, NicPlace, TopologySnapshot, count_numa_nodes, pci_link_class,
                                    pci_path, read_nics, sysfs_bus_id)
from opgate.model.results import Outcome


def _device(sys_root: Path, chain: list[str], numa: int) -> Path:
    """/sys/devices/pci0000:XX/<chain...> with numa_node, and its /sys/bus/pci/devices link."""
    path = sys_root / "devices" / f"pci{chain[0][:7]}"
    for part in chain:
        path = path / part
    path.mkdir(parents=True)
    (path / "numa_node").write_text(f"{numa}\n")
    link = sys_root / "bus" / "pci" / "devices" / chain[-1]
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(path, link.parent), link)
    return path


def test_sysfs_reader(tmp_path: Path) -> None:
    sys_root = tmp_path / "sys"
    for node in (0, 1):
        (sys_root / "devices" / "system" / "node" / f"node{node}").mkdir(parents=True)
    _device(sys_root, ["0000:17:00.0", "0000:18:00.0", "0000:19:00.0"], 0)  # GPU behind a switch
    nic = _device(sys_root, ["0000:17:00.0", "0000:18:00.0", "0000:1a:00.0"], 0)  # NIC on the same switch
    _device(sys_root, ["0000:97:00.0", "0000:98:00.0"], 1)  # GPU on the other socket
    for kind, name in (("net", "ens1"), ("infiniband", "mlx5_0")):
        entry = sys_root / "class" / kind / name
        entry.mkdir(parents=True)
        os.symlink(os.path.relpath(nic, entry), entry / "device")
    (sys_root / "class" / "net" / "lo").mkdir()  # virtual: no device link
    assert count_numa_nodes(sys_root) == 2
    nics = read_nics(sys_root)
    assert [(n.name, n.kind, n.bus_id, n.numa_node) for n in nics] == [("mlx5_0", "infiniband", "0000:1a:00.0", 0)]
    gpu0 = pci_path(sys_root, "0000:19:00.0")
    gpu1 = pci_path(sys_root, "0000:98:00.0")
    assert gpu0 == ("0000:17:00.0", "0000:18:00.0", "0000:19:00.0")
    assert pci_link_class(gpu0, nics[0].pci_path, 0, 0) == "PIX"
    assert pci_link_class(gpu0, gpu1, 0, 1) == "SYS"
    assert pci_link_class(gpu0, ("0000:35:00.0", "0000:36:00.0"), 0, 0) == "NODE"
    assert pci_link_class(("0000:17:00.0", "0000:18:00.0"), ("0000:17:00.0", "0000:20:00.0"), 0, 0) == "PHB"
    assert sysfs_bus_id("00000000:18:00.0") == "0000:18:00.0"


def _snapshot(gpu_numa, nic_numa, links) -> TopologySnapshot:
    gpus = tuple(GpuPlace(i, "NVIDIA H100", f"0000:{i:02x}:00.0", n, "0-31" if n == 0 else "32-63", ())
                 for i, n in enumerate(gpu_numa))
    nics = tuple(NicPlace(f"mlx5_{i}", "infiniband", f"0000:a{i}:00.0", n, ()) for i, n in enumerate(nic_numa))
    return TopologySnapshot("node-a", 2, gpus, nics, tuple(tuple(r) for r in links))


def test_judge_nvlink_host_with_nics_on_both_sockets_passes() -> None:
    links = [["X" if i == j else "NV18" for j in range(4)] for i in range(4)]
    outcome, reason, figures, _ = judge_topology(_snapshot([0, 0, 1, 1], [0, 1], links))
    assert outcome is Outcome.PASSED and "6/6 GPU pairs on NVLink" in reason
    assert any(f.name == "GPU2 NICs on its NUMA node" and f.value == "mlx5_1" for f in figures)


def test_judge_warns_on_gpus_without_a_local_nic_and_unknown_numa() -> None:
    links = [["X", "SYS"], ["SYS", "X"]]
    outcome, reason, _, remediation = judge_topology(_snapshot([0, 1], [0], links))
    assert outcome is Outcome.WARNED and "GPU1 is on NUMA node 1, no NIC is" in reason and "numactl" in remediation
    outcome, reason, _, _ = judge_topology(_snapshot([-1, 0], [0], links))
    assert outcome is Outcome.WARNED and "no NUMA node" in reason


def test_snapshot_round_trip_and_planner_view() -> None:
    snap = _snapshot([0, 1], [0], [["X", "SYS"], ["SYS", "X"]])
    data = snap.to_dict()
    assert TopologySnapshot.from_dict(data) == snap
    facts = {"node-a": data}
    assert link_is_poor(facts, "node-a", 0, 1) and not link_is_poor(facts, "node-b", 0, 1)
    assert nic_local(facts, "node-a", 0) and not nic_local(facts, "node-a", 1)
