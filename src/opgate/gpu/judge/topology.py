"""Pure judging of the GPU <-> NUMA node <-> NIC placement (opgate.probes.topology): a GPU without a NUMA node on a
multi-node host, or GPUs on a node without a NIC while NICs exist. Recorded snapshots test it. The doctor's
`doctor.topology` check (opgate.doctor.topology) collects and calls it."""

from __future__ import annotations

from opgate.probes.topology import TopologySnapshot
from opgate.model.results import Figure, Outcome, gpu_labels


def judge_topology(snapshot: TopologySnapshot) -> tuple[Outcome, str, list[Figure], str]:
    """(outcome, reason, figures, remediation) from a snapshot; pure, so recorded snapshots test it."""
    figures = [Figure("NUMA nodes", snapshot.numa_nodes, key="topology.numa_nodes"),
               Figure("GPUs", len(snapshot.gpus), key="topology.gpus"),
               Figure("NICs (PCI)", len(snapshot.nics), key="topology.nics_pci")]
    problems: list[str] = []
    nic_nodes = {n.numa_node for n in snapshot.nics if n.numa_node >= 0}
    for gpu in snapshot.gpus:
        local = [n.name for n in snapshot.nics if n.numa_node == gpu.numa_node and gpu.numa_node >= 0]
        labels = gpu_labels(gpu.index)
        figures.append(Figure(f"GPU{gpu.index} NUMA node", gpu.numa_node, key="topology.numa_node", labels=labels))
        figures.append(Figure(f"GPU{gpu.index} NICs on its NUMA node", ", ".join(local) or "none",
                              key="topology.nics_on_its_numa_node", labels=labels))
        if gpu.local_cpus:
            figures.append(Figure(f"GPU{gpu.index} local CPUs", gpu.local_cpus, key="topology.local_cpus",
                                  labels=labels))
        if snapshot.numa_nodes > 1 and gpu.numa_node < 0:
            problems.append(f"GPU{gpu.index} ({gpu.bus_id}) has no NUMA node in /sys on a {snapshot.numa_nodes}-node "
                            "host")
        elif nic_nodes and gpu.numa_node >= 0 and gpu.numa_node not in nic_nodes:
            problems.append(f"GPU{gpu.index} is on NUMA node {gpu.numa_node}, no NIC is (NICs on "
                            f"{sorted(nic_nodes)})")
    for i, row in enumerate(snapshot.links):
        figures.append(Figure(f"GPU{i} links", " ".join(row), key="topology.links", labels=gpu_labels(i)))
    nvlinked = sum(1 for i, row in enumerate(snapshot.links) for j, v in enumerate(row) if j > i and v.startswith("NV"))
    sys_pairs = sum(1 for i, row in enumerate(snapshot.links) for j, v in enumerate(row) if j > i and v == "SYS")
    pairs = len(snapshot.gpus) * (len(snapshot.gpus) - 1) // 2
    summary = (f"{len(snapshot.gpus)} GPU(s) on {snapshot.numa_nodes} NUMA node(s), {len(snapshot.nics)} NIC(s); "
               f"{nvlinked}/{pairs} GPU pairs on NVLink, {sys_pairs} across the CPU interconnect")
    if problems:
        return (Outcome.WARNED, summary + "; " + "; ".join(problems[:3]), figures,
                "Pin each GPU's processes to its local CPUs and memory (numactl --cpunodebind/--membind) and give "
                "network-heavy jobs the GPUs on a NIC's NUMA node; `opgate plan` does so with this report's facts.")
    return Outcome.PASSED, summary, figures, ""
