"""Topology facts the planner uses, per node: each GPU's NUMA node, the NUMA nodes that hold a NIC, and the
GPU-GPU link matrix (nvidia-smi topo -m vocabulary: NV#, PIX, PXB, PHB, NODE, SYS).

Read from `opgate doctor --check topology --json report.json` (the check's `extra.topology`), or from a plain
JSON mapping {node: {"gpu_numa": [...], "nic_numa": [...], "links": [[...]]}}.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opgate.model.errors import InputError


def load_topology_facts(path: Path) -> dict[str, Any]:
    from opgate.plan.inputs import read_text_input

    text = read_text_input(path, "the JSON of `opgate doctor --check topology` to --topology")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"--topology {path} is not JSON ({exc.msg} at line {exc.lineno}); fix or re-create it") from None
    if isinstance(data, dict) and "results" in data:  # a doctor report
        facts = {}
        for result in data["results"]:
            topology = result.get("extra", {}).get("topology")
            if result.get("check_id") == "doctor.topology" and topology:
                facts[topology.get("hostname") or "localhost"] = topology
        if not facts:
            raise InputError(f"--topology {path} is a report without a doctor.topology result; run "
                             "`opgate doctor --check topology --json FILE` on the node")
        return facts
    if not isinstance(data, dict):
        raise InputError(f"--topology {path} must map node names to topology facts")
    return data
