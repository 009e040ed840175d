"""The configs real tools read, from a plan: nvidia-mig-parted config, the GPU Operator's MIG ConfigMap and node
labels, the k8s-device-plugin config, DRA ResourceClaimTemplates (NVIDIA DRA driver), and MPS daemon settings.

Formats: mig-parted `version: v1` / `mig-configs` (github.com/NVIDIA/mig-parted, examples/config.yaml); GPU
Operator custom MIG config (ConfigMap with `config.yaml`, node label `nvidia.com/mig.config`, docs
"GPU Operator with MIG"); device plugin `migStrategy: mixed` exposes `nvidia.com/mig-<profile>` resources;
DRA: `resource.k8s.io/v1` ResourceClaimTemplate on device class `mig.nvidia.com` with a CEL selector on the
`gpu.nvidia.com` profile attribute (NVIDIA k8s-dra-driver-gpu).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Sequence

from opgate.plan.inputs import Fleet, Workload
from opgate.plan.layout import MigPlan
from opgate.plan.mps_solver import MpsPlan

GPU_OPERATOR_NAMESPACE = "gpu-operator"


def k8s_name(text: str) -> str:
    """A DNS-1123 name (lower case, digits, '-', at most 63 characters)."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return (name or "x")[:63].rstrip("-")


def mig_parted_config(plan: MigPlan, fleet: Fleet) -> dict[str, Any]:
    """One named config per node; GPUs with the same layout share an entry (mig-parted picks the placements,
    the plan proves one exists). GPUs of the node the plan leaves whole or unused get mig-enabled: false."""
    layouts = {layout.gpu.gpu_id: layout for layout in plan.layouts}
    configs: dict[str, list[dict[str, Any]]] = {}
    for node in fleet.nodes:
        entries: dict[tuple, list[int]] = defaultdict(list)
        for gpu in (g for g in fleet.gpus if g.node == node):
            layout = layouts.get(gpu.gpu_id)
            if layout is None or not layout.mig_enabled or not gpu.slicing.mig_capable:
                entries[()].append(gpu.index)
                continue
            counts = tuple(sorted(Counter(i.profile for i in layout.instances).items()))
            entries[counts].append(gpu.index)
        node_config = []
        for counts, indices in entries.items():
            if not counts:
                node_config.append({"devices": sorted(indices), "mig-enabled": False})
            else:
                node_config.append({"devices": sorted(indices), "mig-enabled": True,
                                    "mig-devices": {profile: n for profile, n in counts}})
        configs[f"opgate-{k8s_name(node)}"] = node_config
    return {"version": "v1", "mig-configs": configs}


def gpu_operator_mig_configmap(plan: MigPlan, fleet: Fleet, name: str = "opgate-mig-config") -> dict[str, Any]:
    import yaml

    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": GPU_OPERATOR_NAMESPACE},
            "data": {"config.yaml": yaml.safe_dump(mig_parted_config(plan, fleet), sort_keys=False)}}


def node_label_commands(fleet: Fleet, configmap: str = "opgate-mig-config") -> list[str]:
    lines = [f"# point the GPU Operator's MIG manager at the ConfigMap: kubectl patch clusterpolicies.nvidia.com/"
             f"cluster-policy --type merge -p '{{\"spec\": {{\"migManager\": {{\"config\": {{\"name\": "
             f"\"{configmap}\"}}}}}}}}'"]
    for node in fleet.nodes:
        lines.append(f"kubectl label node {k8s_name(node)} nvidia.com/mig.config=opgate-{k8s_name(node)} --overwrite")
    return lines


def device_plugin_config() -> dict[str, Any]:
    """k8s-device-plugin config for MIG: the mixed strategy exposes one resource per profile."""
    return {"version": "v1", "flags": {"migStrategy": "mixed"}}


def resource_requests(plan: MigPlan) -> dict[str, dict[str, int]]:
    """Per workload, the extended resources its pods request under migStrategy mixed (one replica per pod)."""
    found: dict[str, Counter[str]] = defaultdict(Counter)
    for layout in plan.layouts:
        for instance in layout.instances:
            if instance.workload:
                resource = "nvidia.com/gpu" if instance.profile == "whole" else f"nvidia.com/mig-{instance.profile}"
                found[instance.workload][resource] += 1
    return {w: dict(c) for w, c in sorted(found.items())}


def dra_claim_templates(plan: MigPlan, namespace: str = "default") -> list[dict[str, Any]]:
    """One ResourceClaimTemplate per workload x profile it was given (resource.k8s.io/v1)."""
    wanted: set[tuple[str, str]] = set()
    for layout in plan.layouts:
        for instance in layout.instances:
            if instance.workload:
                wanted.add((instance.workload, instance.profile))
    templates = []
    for workload, profile in sorted(wanted):
        if profile == "whole":
            request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
        else:
            request = {"name": "mig", "exactly": {
                "deviceClassName": "mig.nvidia.com",
                "selectors": [{"cel": {"expression": f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"}}],
            }}
        templates.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                          "metadata": {"name": k8s_name(f"{workload}-{profile.replace('.', '-').replace('+', '-')}"),
                                       "namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "opgate"}},
                          "spec": {"spec": {"devices": {"requests": [request]}}}})
    return templates


def mps_settings(plan: MpsPlan) -> str:
    """Shell-readable MPS settings per node and GPU: the control daemon's environment and commands, and each
    client's environment (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)."""
    lines = ["# MPS settings planned by opgate plan mps; one control daemon per node (NVIDIA MPS documentation).",
             "# Clients set their own limits; the daemon's defaults cap anything a client does not set."]
    by_node: dict[str, list] = defaultdict(list)
    for entry in plan.gpus:
        by_node[entry.gpu.node].append(entry)
    for node, entries in by_node.items():
        lines += ["", f"## node {node}", "export CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
                  "export CUDA_MPS_LOG_DIRECTORY=/tmp/nvidia-log", "nvidia-cuda-mps-control -d"]
        for entry in entries:
            total = sum(c.pinned_mem_gb for c in entry.clients)
            lines.append(f"# GPU {entry.gpu.index} ({entry.gpu.slicing.key}): {len(entry.clients)} clients, "
                         f"{sum(c.thread_percent for c in entry.clients)}% of threads, {total:g} GB pinned")
            for c in entry.clients:
                lines.append(f"# client {c.workload} replica {c.replica}:")
                lines.append(f"CUDA_VISIBLE_DEVICES={entry.gpu.index} CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="
                             f"{c.thread_percent} CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={entry.gpu.index}="
                             f"{int(round(c.pinned_mem_gb * 1024))}M")
    return "\n".join(lines) + "\n"


def device_plugin_mps_config(plan: MpsPlan) -> dict[str, Any]:
    """k8s-device-plugin MPS sharing: the plugin splits a GPU evenly among `replicas`; the largest client count
    of the plan is the share count (clients that need more set their own limits, see mps_settings)."""
    most = max((len(entry.clients) for entry in plan.gpus), default=1)
    return {"version": "v1", "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": max(2, most)}]}}}


def write_mig_outputs(plan: MigPlan, fleet: Fleet, workloads: Sequence[Workload], out: Path) -> list[Path]:
    import json

    import yaml

    out.mkdir(parents=True, exist_ok=True)
    files = {
        "mig-parted-config.yaml": yaml.safe_dump(mig_parted_config(plan, fleet), sort_keys=False),
        "gpu-operator-mig-configmap.yaml": yaml.safe_dump(gpu_operator_mig_configmap(plan, fleet), sort_keys=False),
        "node-labels.sh": "\n".join(node_label_commands(fleet)) + "\n",
        "device-plugin-config.yaml": yaml.safe_dump(device_plugin_config(), sort_keys=False),
        "resource-requests.yaml": yaml.safe_dump(resource_requests(plan), sort_keys=False),
        "dra-resourceclaimtemplates.yaml": yaml.safe_dump_all(dra_claim_templates(plan), sort_keys=False),
        "mig-plan.json": json.dumps(plan.to_dict(), indent=2),
    }
    written = []
    for name, text in files.items():
        path = out / name
        path.write_text(text)
        written.append(path)
    return written


def write_mps_outputs(plan: MpsPlan, out: Path) -> list[Path]:
    import json

    import yaml

    out.mkdir(parents=True, exist_ok=True)
    files = {"mps-settings.sh": mps_settings(plan),
             "device-plugin-mps-config.yaml": yaml.safe_dump(device_plugin_mps_config(plan), sort_keys=False),
             "mps-plan.json": json.dumps(plan.to_dict(), indent=2)}
    written = []
    for name, text in files.items():
        (out / name).write_text(text)
        written.append(out / name)
    return written
