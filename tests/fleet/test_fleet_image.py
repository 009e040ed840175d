"""deploy/image/Containerfile built for real by scripts/build_image.sh and run as the manifests run it.

Opt-in (OPGATE_TEST_IMAGE=1; a build takes about 3 minutes and needs podman, and mmdebstrap for the base):
the base is a Debian bookworm minbase made here with mmdebstrap and imported (no registry), opgate's wheel is
built from this checkout. Then, in the image, as user 65534 with a read-only root filesystem, /tmp a tmpfs and
every capability dropped (the chart's securityContext), and opgate as PID 1 (the image's entrypoint):
`opgate doctor` (no GPU here: every GPU check skips with its reason), `opgate serve` with its port published and
scraped from the host, the probe Job's `serve --once standard`, and the node labeller patching a node on a fake
Kubernetes API over HTTPS with a service-account token and CA mounted where a pod has them.

Knobs: OPGATE_TEST_IMAGE_ENGINE (default: podman, with `--runtime runc` where cgroups are v1 and runc is
installed: crun refuses them), OPGATE_TEST_IMAGE_BASE (a base image to use instead of making one).
"""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator, Sequence

import pytest
from opgate_testing import REPO

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("OPGATE_TEST_IMAGE") != "1",
                       reason="builds and runs the container image (about 3 min): set OPGATE_TEST_IMAGE=1"),
]

TAG = "localhost/opgate-test:image"
EVIDENCE = REPO / "build" / "image" / "image-test.log"


def engine_command() -> list[str]:
    if os.environ.get("OPGATE_TEST_IMAGE_ENGINE"):
        return shlex.split(os.environ["OPGATE_TEST_IMAGE_ENGINE"])
    if not shutil.which("podman"):
        pytest.skip("no podman here (apt-get install podman): the image cannot be built or run")
    info = subprocess.run(["podman", "info", "--format", "{{.Host.CgroupsVersion}}"], capture_output=True,
                          text=True, timeout=60)
    if info.stdout.strip() == "v1" and shutil.which("runc"):
        return ["podman", "--runtime", "runc"]
    return ["podman"]


def ulimit_args() -> list[str]:
    """podman's default rlimits (nofile, nproc 1048576) need CAP_SYS_RESOURCE to raise, which a container running
    podman lacks; these never exceed what this process has (nproc: podman's own conmon runs at 32768 here)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return ["--ulimit", f"nofile={soft}:{hard}", "--ulimit", "nproc=4096:4096"]


# The chart's securityContext: runAsUser 65534 (the image's USER), readOnlyRootFilesystem, drop ALL, no escalation.
POD_LIKE = ["--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]


def record(title: str, text: str) -> None:
    EVIDENCE.parent.mkdir(parents=True, exist_ok=True)
    with EVIDENCE.open("a") as log:
        log.write(f"== {title}\n{text.rstrip()}\n\n")


@pytest.fixture(scope="module")
def image() -> Iterator[list[str]]:
    engine = engine_command()
    base = os.environ.get("OPGATE_TEST_IMAGE_BASE")
    if not base and not shutil.which("mmdebstrap"):
        pytest.skip("no mmdebstrap here (apt-get install mmdebstrap) to make the base, and no OPGATE_TEST_IMAGE_BASE")
    EVIDENCE.unlink(missing_ok=True)
    command = ["bash", str(REPO / "scripts" / "build_image.sh"), "--tag", TAG, "--engine", shlex.join(engine),
               *(["--base", base] if base else ["--offline-base"]), "--", *ulimit_args()]
    started = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    size = int(subprocess.run([*engine, "image", "inspect", "--format", "{{.Size}}", TAG], capture_output=True,
                              text=True, timeout=60, check=True).stdout)
    record("build", f"{shlex.join(command)}\n{time.monotonic() - started:.0f} s; {TAG}: {size} bytes "
                    f"({size / 2**20:.0f} MiB)\n" + proc.stdout[-1500:])
    yield engine
    subprocess.run([*engine, "rmi", "--force", TAG], capture_output=True, timeout=120)


def run_in_image(engine: list[str], args: list[str], options: Sequence[str] = (), timeout: float = 300
                 ) -> subprocess.CompletedProcess:
    return subprocess.run([*engine, "run", "--rm", *ulimit_args(), *POD_LIKE, *options, TAG, *args],
                          capture_output=True, text=True, timeout=timeout)


def test_the_doctor_runs_as_the_entrypoint_and_skips_each_gpu_check_with_its_reason(image, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)  # written by the image's user 65534
    proc = run_in_image(image, ["doctor", "--json", "/out/report.json"], ["--volume", f"{out}:/out"])
    record("opgate doctor (in the image, no GPU)", f"exit code {proc.returncode}\n{proc.stdout}{proc.stderr}")
    report = json.loads((out / "report.json").read_text())
    outcomes = {r["check_id"]: r for r in report["results"]}
    # opgate is PID 1 here: a child that took that for a dead parent exited 1 and every check was an error.
    assert not [c for c, r in outcomes.items() if r["outcome"] == "error"], proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert outcomes["doctor.gpu_inventory"]["outcome"] == "skipped"
    assert "libnvidia-ml.so.1" in outcomes["doctor.gpu_inventory"]["reason"]
    assert outcomes["doctor.container"]["outcome"] == "passed"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str) -> dict[str, list[Any]]:
    parser = pytest.importorskip("prometheus_client.parser")
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {family.name: family.samples for family in parser.text_string_to_metric_families(text)}


def test_the_exporter_is_scraped_from_the_host_and_stops_on_sigterm(image):
    port, name = free_port(), f"opgate-test-serve-{os.getpid()}"
    started = subprocess.run([*image, "run", "--detach", "--name", name, *ulimit_args(), *POD_LIKE, "--publish",
                              f"127.0.0.1:{port}:9478", TAG, "serve", "--host=0.0.0.0", "--port=9478",
                              "--interval=300"], capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    try:
        deadline, metrics = time.monotonic() + 90, {}
        while time.monotonic() < deadline:
            try:
                metrics = scrape(f"http://127.0.0.1:{port}/metrics")
            except (urllib.error.URLError, ConnectionError):
                metrics = {}
            runs = [s.value for s in metrics.get("opgate_runs", []) if s.labels.get("level") == "basic"]
            if runs and runs[0] >= 1:
                break
            time.sleep(1)
        outcome = {s.labels["check"]: s.value for s in metrics.get("opgate_check_outcome", [])}
        record("scrape of /metrics from the host", json.dumps({"port": port, "opgate_check_outcome": outcome,
                                                               "families": sorted(metrics)}, indent=1))
        assert outcome.get("doctor.gpu_inventory") == -1  # skipped: no driver in a container without a GPU
        assert outcome.get("doctor.container") == 0
        assert [s.value for s in metrics["opgate_ready"] if s.labels["level"] == "basic"] == [0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as response:
            assert response.status == 200
        stop_started = time.monotonic()
        subprocess.run([*image, "stop", "--time", "20", name], capture_output=True, timeout=60, check=True)
        stopped_s = time.monotonic() - stop_started
        code = subprocess.run([*image, "inspect", "--format", "{{.State.ExitCode}}", name], capture_output=True,
                              text=True, timeout=60).stdout.strip()
        record("stop", f"SIGTERM to PID 1 (opgate serve): exit code {code} after {stopped_s:.1f} s")
        assert code == "0" and stopped_s < 15
    finally:
        subprocess.run([*image, "rm", "--force", name], capture_output=True, timeout=60)


def test_the_probe_job_runs_once_and_exits_with_the_doctors_code(image):
    proc = run_in_image(image, ["serve", "--once", "standard"])
    record("serve --once standard (the probe Job)", f"exit code {proc.returncode}\n{proc.stdout[-1500:]}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert re.search(r"opgate\.io/ready=pass", proc.stdout)


class FakeApi(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []

    def do_PATCH(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        FakeApi.received.append({"path": self.path, "auth": self.headers["Authorization"],
                                 "type": self.headers["Content-Type"], "body": json.loads(body)})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


def test_the_node_labeller_patches_its_node_over_https_with_the_pods_token(image, tmp_path):
    if not shutil.which("openssl"):
        pytest.skip("no openssl here to make the fake API server's certificate")
    account = tmp_path / "serviceaccount"
    account.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=kubernetes", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(tmp_path / "key.pem"),
                    "-out", str(account / "ca.crt")], capture_output=True, timeout=60, check=True)
    (account / "token").write_text("pod-token\n")
    for path in (account, account / "ca.crt", account / "token"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(account / "ca.crt", tmp_path / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    FakeApi.received.clear()
    try:
        proc = run_in_image(image, ["serve", "--once", "basic"], [
            "--network", "host", "--volume", f"{account}:/var/run/secrets/kubernetes.io/serviceaccount:ro",
            "--env", "KUBERNETES_SERVICE_HOST=127.0.0.1", "--env", f"KUBERNETES_SERVICE_PORT={server.server_port}",
            "--env", "OPGATE_LABEL_NODE=gpu-node-7"])
    finally:
        server.shutdown()
        server.server_close()
    record("node labeller (fake API over HTTPS)", f"exit code {proc.returncode}\n{proc.stdout[-600:]}"
                                                   f"{proc.stderr[-600:]}\n{json.dumps(FakeApi.received)}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert FakeApi.received == [{"path": "/api/v1/nodes/gpu-node-7", "auth": "Bearer pod-token",
                                 "type": "application/merge-patch+json",
                                 "body": {"metadata": {"labels": {"opgate.io/ready": "pass"}}}}]
