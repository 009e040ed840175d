"""The optional node-labeller: set `opgate.io/ready=pass|warn|fail` on this pod's Kubernetes node.

Uses the pod's service-account token and the in-cluster API address (no Kubernetes client library):
one JSON merge patch of the node's labels, which the chart's ClusterRole allows (nodes: get, patch).
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from pathlib import Path

LABEL = "opgate.io/ready"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
READY_VALUES = ("pass", "warn", "fail")


class LabelError(Exception):
    """The label could not be set; the message says why and what to check."""


def label_patch(value: str) -> dict[str, object]:
    if value not in READY_VALUES:
        raise ValueError(f"ready value {value!r} is not one of {READY_VALUES}")
    return {"metadata": {"labels": {LABEL: value}}}


def label_node(node: str, value: str, api: str | None = None, account: Path = SERVICE_ACCOUNT,
               timeout_s: float = 10.0) -> None:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    api = api or (f"https://{host}:{port}" if host else None)
    if not api:
        raise LabelError("--label-node needs the in-cluster API (KUBERNETES_SERVICE_HOST is not set): run it in "
                         "a pod with the chart's service account, or leave --label-node out")
    try:
        token = (account / "token").read_text().strip()
    except OSError as exc:
        raise LabelError(f"--label-node: no service-account token at {account / 'token'} ({exc})") from exc
    context = ssl.create_default_context(cafile=str(account / "ca.crt")) if (account / "ca.crt").is_file() else None
    request = urllib.request.Request(
        f"{api}/api/v1/nodes/{node}", method="PATCH", data=json.dumps(label_patch(value)).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/merge-patch+json",
                 "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        raise LabelError(f"--label-node {node}: the API refused the label patch (HTTP {exc.code}); the service "
                         "account needs nodes get/patch (the chart's ClusterRole)") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise LabelError(f"--label-node {node}: the API at {api} did not answer ({exc})") from exc
