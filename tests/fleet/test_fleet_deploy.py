"""deploy/: every plain manifest and every document the Helm chart renders (through Helm's own Go SDK,
helm-python-sdk, offline) validated against the Kubernetes OpenAPI schemas that kubernetes-validate
ships, strict (unknown fields fail), for every Kubernetes minor version from 1.25 to the newest shipped;
RBAC limited to nodes get/patch; the probe Job takes the node's GPUs exclusively."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opgate_testing import REPO

yaml = pytest.importorskip("yaml")
kubernetes_validate = pytest.importorskip("kubernetes_validate")
k8s_utils = pytest.importorskip("kubernetes_validate.utils")

K8S = REPO / "deploy" / "k8s"
CHART = REPO / "deploy" / "helm" / "opgate"
CUSTOM_RESOURCES = {("monitoring.coreos.com/v1", "ServiceMonitor"),  # CRDs: no upstream schema
                    ("monitoring.coreos.com/v1", "PrometheusRule")}
RULES = REPO / "deploy" / "prometheus" / "opgate-rules.yaml"
OLDEST_SUPPORTED = (1, 25)  # Chart.yaml kubeVersion


def supported_versions() -> list[str]:
    versions = sorted({tuple(int(p) for p in v.split(".")[:2]) for v in k8s_utils.all_versions()})
    return [f"{major}.{minor}.0" for major, minor in versions if (major, minor) >= OLDEST_SUPPORTED]


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def plain_manifests() -> list[dict[str, Any]]:
    return [doc for path in sorted(K8S.glob("*.yaml")) for doc in documents(path.read_text())]


def render_chart(values: dict[str, Any]) -> list[dict[str, Any]]:
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's Go SDK, offline) is not installed")
    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(values, name="opgate", namespace="opgate")
    return [doc for name, text in sorted(rendered.items()) if name.endswith(".yaml") for doc in documents(text)]


EVERYTHING_ON = {"nodeLabeller": {"enabled": True}, "serviceMonitor": {"enabled": True},
                 "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
                 "standardCronJob": {"enabled": True}, "standardJob": {"nodes": ["gpu-node-1", "gpu-node-2"]}}


def validate_all(docs: list[dict[str, Any]]) -> None:
    assert docs
    versions = supported_versions()
    assert versions[0] == "1.25.0" and len(versions) >= 10
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CUSTOM_RESOURCES:
            continue
        for version in versions:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} invalid for Kubernetes {version}: {exc.message} "
                            f"at {'/'.join(map(str, exc.path))}")


def test_plain_manifests_are_valid_for_every_supported_kubernetes() -> None:
    docs = plain_manifests()
    assert {d["kind"] for d in docs} == {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                         "DaemonSet", "Service", "ServiceMonitor", "Job", "CronJob"}
    validate_all(docs)


@pytest.mark.parametrize("values", [{}, EVERYTHING_ON], ids=["defaults", "everything-on"])
def test_the_rendered_chart_is_valid_for_every_supported_kubernetes(values: dict[str, Any]) -> None:
    docs = render_chart(values)
    kinds = sorted(d["kind"] for d in docs)
    if values:
        assert kinds == sorted(["ClusterRole", "ClusterRoleBinding", "CronJob", "CronJob", "DaemonSet", "Job", "Job",
                                "PrometheusRule", "Service", "ServiceAccount", "ServiceMonitor"])
    else:  # defaults: exporter only, no labeller RBAC, no probe Jobs, no ServiceMonitor, no PrometheusRule
        assert kinds == ["DaemonSet", "Service", "ServiceAccount"]
    validate_all(docs)


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    [only] = pod_spec["containers"]
    return only


@pytest.mark.parametrize("source", ["plain", "chart"])
def test_rbac_is_nodes_get_patch_only_and_probe_pods_take_every_gpu(source: str) -> None:
    docs = plain_manifests() if source == "plain" else render_chart(EVERYTHING_ON)
    [role] = by_kind(docs, "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    assert not by_kind(docs, "Role")
    [daemonset] = by_kind(docs, "DaemonSet")
    exporter = container(daemonset["spec"]["template"]["spec"])
    assert "nvidia.com/gpu" not in str(exporter.get("resources")), "the exporter must not take a GPU from workloads"
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in exporter["env"]
    assert exporter["securityContext"]["readOnlyRootFilesystem"] and not exporter["securityContext"][
        "allowPrivilegeEscalation"]
    pods = [j["spec"]["template"]["spec"] for j in by_kind(docs, "Job")] + \
        [c["spec"]["jobTemplate"]["spec"]["template"]["spec"] for c in by_kind(docs, "CronJob")]
    assert pods
    for pod in pods:
        probe = container(pod)
        assert probe["args"] == ["serve", "--once", "standard"]
        assert probe["resources"]["requests"]["nvidia.com/gpu"] == probe["resources"]["limits"]["nvidia.com/gpu"] == 8
        assert "kubernetes.io/hostname" in pod["nodeSelector"] and pod["restartPolicy"] == "Never"
    [cron] = by_kind(docs, "CronJob")[:1]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"


@pytest.mark.parametrize("source", ["plain", "chart"])
def test_the_service_monitor_scrapes_the_port_the_service_and_exporter_expose(source: str) -> None:
    docs = plain_manifests() if source == "plain" else render_chart(EVERYTHING_ON)
    [monitor], [service], [daemonset] = (by_kind(docs, k) for k in ("ServiceMonitor", "Service", "DaemonSet"))
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()
    ports = {p["name"]: p["containerPort"] for p in container(daemonset["spec"]["template"]["spec"])["ports"]}
    assert ports["metrics"] == 9478
    # the alerts of deploy/prometheus name the host by this label (the instance is the pod's IP)
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"} in endpoint["relabelings"]
    # and OpgateExporterDown/Missing select job="opgate-exporter": the operator names the job after the Service
    assert service["metadata"]["name"] == "opgate-exporter" and 'job="opgate-exporter"' in RULES.read_text()


def test_the_charts_prometheus_rule_is_the_rules_file() -> None:
    [rule] = by_kind(render_chart(EVERYTHING_ON), "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(RULES.read_text())  # files/opgate-rules.yaml links to it
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["metadata"]["namespace"] == "opgate"


def test_the_chart_defaults_render_what_the_plain_daemonset_says() -> None:
    [plain] = by_kind(plain_manifests(), "DaemonSet")
    [rendered] = by_kind(render_chart({"nodeLabeller": {"enabled": True}}), "DaemonSet")
    p, r = container(plain["spec"]["template"]["spec"]), container(rendered["spec"]["template"]["spec"])
    assert p["image"] == r["image"] and p["ports"] == r["ports"]
    assert [e["name"] for e in p["env"]] == [e["name"] for e in r["env"]]
    assert p["args"][0] == r["args"][0] == "serve" and "--port=9478" in r["args"] and "9478" in p["args"]


def test_the_validation_really_rejects_a_typo() -> None:
    [daemonset] = by_kind(plain_manifests(), "DaemonSet")
    daemonset["spec"]["template"]["spec"]["runtimeClass"] = "nvidia"  # the field is runtimeClassName
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, "1.33.0", strict=True)
