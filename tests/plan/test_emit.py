"""Emitted configs: Kubernetes objects validated offline against the API schemas (kubernetes-validate), the
mig-parted config in the shape mig-parted reads, MPS settings within the plan's limits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from opgate.plan.emit import (device_plugin_mps_config, dra_claim_templates, gpu_operator_mig_configmap,
                              mig_parted_config, mps_settings, resource_requests)
from opgate.plan.inputs import load_fleet, load_workloads, parse_fleet, parse_workloads
from opgate.plan.legality import check_gpu
from opgate.plan.mig_solver import plan_mig
from opgate.plan.mps_solver import check_mps_plan, plan_mps

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "plan"
K8S_VERSION = "1.34.0"  # resource.k8s.io/v1 (DRA GA) is served from Kubernetes 1.34


@pytest.fixture(scope="module")
def example_plan():
    fleet = load_fleet(EXAMPLES / "fleet.toml")
    jobs = load_workloads(EXAMPLES / "workloads.toml")
    return fleet, jobs, plan_mig(fleet, jobs, time_limit_s=10)


def test_kubernetes_objects_validate(example_plan) -> None:
    fleet, _, plan = example_plan
    objects = [gpu_operator_mig_configmap(plan, fleet), *dra_claim_templates(plan)]
    assert any(o["kind"] == "ResourceClaimTemplate" for o in objects)
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_validator_rejects_a_broken_claim(example_plan) -> None:
    _, _, plan = example_plan
    broken = dra_claim_templates(plan)[0]
    broken["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_mig_parted_config_counts_are_legal_layouts(example_plan) -> None:
    fleet, _, plan = example_plan
    config = mig_parted_config(plan, fleet)
    assert config["version"] == "v1"
    models = {(g.node, g.index): g.slicing.key for g in fleet.gpus}
    embedded = yaml.safe_load(gpu_operator_mig_configmap(plan, fleet)["data"]["config.yaml"])
    assert embedded == config
    for name, entries in config["mig-configs"].items():
        covered = sorted(i for e in entries for i in e["devices"])
        node = next(n for n in fleet.nodes if f"opgate-{n}" == name)
        assert covered == sorted(g.index for g in fleet.gpus if g.node == node)
        for entry in entries:
            assert set(entry) <= {"devices", "mig-enabled", "mig-devices"}
            if entry["mig-enabled"]:
                total = sum(entry["mig-devices"].values())
                assert 1 <= total <= 7
                model = models[(node, entry["devices"][0])]
                # the counts come from a layout the checker accepted
                layout = next(l for l in plan.layouts if l.gpu.node == node and l.gpu.index == entry["devices"][0])
                assert check_gpu(model, "g", [(i.profile, i.start) for i in layout.instances]) == []
    requests = resource_requests(plan)
    assert requests["embed"] == {"nvidia.com/mig-1g.10gb": 6}


def test_mps_plan_and_settings() -> None:
    fleet = parse_fleet({"gpu": [{"model": "l4", "count": 2, "node": "e"}]})
    jobs = parse_workloads({"workload": [
        {"name": "asr", "memory_gb": 6, "replicas": 3, "compute_percent": 30, "isolation": "mps"},
        {"name": "ocr", "memory_gb": 10, "replicas": 2, "compute_percent": 50, "isolation": "mps"},
        {"name": "big", "memory_gb": 30, "compute_percent": 10, "isolation": "mps"}]})
    plan = plan_mps(fleet, jobs, time_limit_s=10)
    assert plan.stats.status == "OPTIMAL"
    assert plan.placed_replicas == 5 and [u.workload for u in plan.unplaced] == ["big"]
    assert check_mps_plan(plan, jobs) == []
    text = mps_settings(plan)
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" in text and "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=" in text
    assert device_plugin_mps_config(plan)["sharing"]["mps"]["resources"][0]["name"] == "nvidia.com/gpu"


def test_cli_plan_mig_writes_configs_and_exits_1_when_something_does_not_fit(tmp_path, opgate_env) -> None:
    run = subprocess.run([sys.executable, "-m", "opgate", "plan", "mig", str(EXAMPLES / "workloads.toml"),
                          "--fleet", str(EXAMPLES / "fleet.toml"), "--out", str(tmp_path)],
                         capture_output=True, text=True, env=opgate_env, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "NOT PLACED llama-70b-fp8" in run.stdout and "proven optimal" in run.stdout
    assert (tmp_path / "mig-parted-config.yaml").is_file() and (tmp_path / "dra-resourceclaimtemplates.yaml").is_file()


def test_cli_bad_input_is_one_line_exit_2(tmp_path, opgate_env) -> None:
    bad = tmp_path / "w.toml"
    bad.write_text('[[workload]]\nname = "x"\n')
    run = subprocess.run([sys.executable, "-m", "opgate", "plan", "mig", str(bad), "--fleet",
                          str(EXAMPLES / "fleet.toml")], capture_output=True, text=True, env=opgate_env, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and "memory_gb" in run.stderr
