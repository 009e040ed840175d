"""Planner inputs: the workload and fleet files, doctor reports as a fleet, and the one-line input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opgate.model.errors import InputError
from opgate.plan.inputs import load_fleet, load_workloads, model_from_nvml_name, parse_workloads

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plan"


def test_examples_load() -> None:
    fleet = load_fleet(EXAMPLES / "fleet.toml")
    assert len(fleet.gpus) == 8 and fleet.nodes == ("hgx-a", "dgx-b", "edge-c")
    assert {g.slicing.key for g in fleet.gpus} == {"h100-80gb", "a100-80gb", "l4"}
    jobs = load_workloads(EXAMPLES / "workloads.toml")
    assert {w.name for w in jobs} >= {"chat-8b", "vision-llm"}


def test_yaml_workloads(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("workload:\n  - name: a\n    memory_gb: 5\n    replicas: 2\n    isolation: mps\n"
                    "    compute_percent: 20\n")
    (job,) = load_workloads(path)
    assert (job.name, job.replicas, job.isolation, job.compute_percent) == ("a", 2, "mps", 20)


@pytest.mark.parametrize("entry,message", [
    ({"name": "a"}, "has no memory_gb"),
    ({"name": "a", "memory_gb": "lots"}, "is not a number"),
    ({"name": "a", "memory_gb": float("nan")}, "not a finite number"),  # TOML's nan was placed (issue #28)
    ({"name": "a", "memory_gb": float("inf")}, "not a finite number"),
    ({"name": "a", "memory_gb": 5, "isolation": "vgpu"}, "isolation = 'vgpu'"),
    ({"name": "a", "memory_gb": 5, "compute_percent": 150}, "above 100"),
    ({"name": "a", "memory_gb": 5, "replicas": 1.5}, "whole number"),
    ({"name": "a", "memory_gb": 5, "models": ["k80"]}, "not in opgate's catalogue"),
])
def test_bad_workloads_name_the_input(entry, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_workloads({"workload": [entry]})


def test_fleet_from_doctor_reports(tmp_path: Path) -> None:
    def report(host: str, names: list[str]) -> dict:
        return {"host": {"hostname": host}, "results": [
            {"check_id": "doctor.gpu_inventory", "extra": {"gpus": [{"index": i, "name": n} for i, n in enumerate(names)]}}]}

    path = tmp_path / "reports.json"
    path.write_text(json.dumps([report("n1", ["NVIDIA H200"] * 2), report("n2", ["NVIDIA A100-SXM4-40GB", "NVIDIA L4"])]))
    fleet = load_fleet(path)
    assert [(g.gpu_id, g.slicing.key) for g in fleet.gpus] == [
        ("n1/0", "h200-141gb"), ("n1/1", "h200-141gb"), ("n2/0", "a100-40gb"), ("n2/1", "l4")]
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"host": {"hostname": "x"}, "results": []}))
    with pytest.raises(InputError, match="no doctor.gpu_inventory GPUs"):
        load_fleet(empty)


def test_nvml_names() -> None:
    assert model_from_nvml_name("NVIDIA H100 80GB HBM3") == "h100"
    assert model_from_nvml_name("NVIDIA A100-SXM4-80GB") == "a100"
    assert model_from_nvml_name("NVIDIA L40S") == "l40s"
