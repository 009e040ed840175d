"""The fleet's node task without Ray (what each Ray task runs: the real `opgate doctor` in a child), the
node-labeller's request, and the fleet CLI's one-line input errors."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
from opgate_testing import DATA, run_opgate

from opgate.fleet.k8s_label import LABEL, LabelError, label_node, label_patch
from opgate.fleet.node_task import NodeOutcome, run_verb_on_node


def test_the_node_task_runs_the_single_host_verb_and_returns_its_report(fleet_env: dict[str, str],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", fleet_env["PYTHONPATH"])
    monkeypatch.setenv("OPGATE_PLANTED_TBS", "4.25")
    outcome = NodeOutcome.from_dict(run_verb_on_node("n1", ["doctor", "--check", "planted_bandwidth"], 120))
    assert outcome.error == "" and outcome.exit_code == 0
    [result] = outcome.report["results"]  # type: ignore[index]
    assert result["check_id"] == "planted.bandwidth" and result["figures"][0]["value"] == 4.25
    assert outcome.report["schema_version"] == 2  # type: ignore[index]


def test_the_node_task_runs_inspect_as_well(fleet_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", fleet_env["PYTHONPATH"])
    binary = DATA / "inspect" / "compress_size.o"
    outcome = NodeOutcome.from_dict(run_verb_on_node("n1", ["inspect", str(binary), "--targets", "h100,b200"], 120))
    assert outcome.error == "" and outcome.exit_code == 0 and outcome.report["verb"] == "inspect"  # type: ignore[index]
    assert outcome.report["results"]  # type: ignore[index]


def test_the_node_task_turns_bad_input_and_hangs_into_an_error(fleet_env: dict[str, str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", fleet_env["PYTHONPATH"])
    bad = NodeOutcome.from_dict(run_verb_on_node("n1", ["doctor", "--check", "no_such_check"], 60))
    assert bad.report is None and bad.exit_code == 2 and "no_such_check" in bad.error
    monkeypatch.setenv("OPGATE_PLANTED_SLEEP_S", "30")
    hung = NodeOutcome.from_dict(run_verb_on_node("n1", ["doctor", "--check", "planted_bandwidth"], 3))
    assert "did not finish within 3 s" in hung.error


class _ApiServer(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_PATCH(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _ApiServer.seen.append({"path": self.path, "type": self.headers["Content-Type"],
                                "auth": self.headers["Authorization"], "body": json.loads(body)})
        code = 403 if "forbidden" in self.path else 200
        self.send_response(code)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


@pytest.fixture
def api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ApiServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_labeller_sends_one_merge_patch_with_the_pods_token(api: str, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("secret-token\n")
    label_node("gpu-17", "warn", api=api, account=tmp_path)
    assert _ApiServer.seen[-1] == {"path": "/api/v1/nodes/gpu-17", "type": "application/merge-patch+json",
                                   "auth": "Bearer secret-token", "body": {"metadata": {"labels": {LABEL: "warn"}}}}
    with pytest.raises(LabelError, match="HTTP 403"):
        label_node("forbidden", "pass", api=api, account=tmp_path)
    with pytest.raises(LabelError, match="no service-account token"):
        label_node("gpu-17", "pass", api=api, account=tmp_path / "missing")
    with pytest.raises(ValueError):
        label_patch("maybe")


def test_the_labeller_outside_a_cluster_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(LabelError, match="KUBERNETES_SERVICE_HOST is not set"):
        label_node("gpu-17", "pass")


def test_fleet_input_errors_are_one_line_exit_2(fleet_env: dict[str, str]) -> None:
    out = run_opgate(["fleet", "doctor", "--address", "127.0.0.1:1", "--json", "/nonexistent-dir/f.json"],
                     env=fleet_env, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "/nonexistent-dir" in out.stderr
    out = run_opgate(["fleet", "doctor", "--address", "127.0.0.1:1"], env=fleet_env, timeout=60)
    assert out.returncode == 2 and "no Ray cluster answers there" in out.stderr and "Traceback" not in out.stderr
    out = run_opgate(["fleet", "doctor", "--level", "basic", "--json", "/tmp/x.json", "--", "--json", "y"],
                     env=fleet_env, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    out = run_opgate(["serve", "--once", "basic", "--label-node", "gpu-17", "--check", "planted_bandwidth"],
                     env={k: v for k, v in fleet_env.items() if k != "KUBERNETES_SERVICE_HOST"}, timeout=120)
    assert out.returncode == 2 and "KUBERNETES_SERVICE_HOST" in out.stderr and "Traceback" not in out.stderr
