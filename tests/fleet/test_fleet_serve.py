"""`opgate serve` started on 127.0.0.1 as the command it is, scraped with Prometheus' own text parser:
metric names and labels, a failing check that passes again clears its failure, /healthz, /report.json."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
from opgate_testing import REPO

prometheus_parser = pytest.importorskip("prometheus_client.parser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fetch(url: str, data: bytes | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scrape(base: str) -> dict[str, list]:
    _, text = fetch(f"{base}/metrics")
    return {family.name: family.samples for family in prometheus_parser.text_string_to_metric_families(text)}


def outcome_of(metrics: dict[str, list], check: str) -> float | None:
    for sample in metrics.get("opgate_check_outcome", []):
        if sample.labels["check"] == check:
            return sample.value
    return None


def wait_until(predicate, timeout_s: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError("condition not reached in time")


@pytest.fixture
def exporter(fleet_env: dict[str, str], tmp_path: Path) -> Iterator[tuple[str, Path]]:
    flap = tmp_path / "flap"
    flap.write_text("fail")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "opgate", "serve", "--host", "127.0.0.1", "--port", str(port), "--interval", "1",
         "--check", "planted_flapping", "--check", "planted_bandwidth"],
        env={**fleet_env, "OPGATE_PLANTED_FLAP_FILE": str(flap)}, cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _up(base), 30)
        yield base, flap
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def _up(base: str) -> bool:
    try:
        return fetch(f"{base}/healthz")[0] in (200, 503)
    except OSError:
        return False


def test_metrics_have_stable_names_and_labels_and_a_failure_recovers(exporter: tuple[str, Path]) -> None:
    base, flap = exporter
    metrics = wait_until(lambda: (m := scrape(base)) and outcome_of(m, "planted.flapping") is not None and m)
    assert outcome_of(metrics, "planted.flapping") == 2  # failed
    assert outcome_of(metrics, "planted.bandwidth") == 0  # passed
    sample = next(s for s in metrics["opgate_check_outcome"] if s.labels["check"] == "planted.flapping")
    assert set(sample.labels) == {"check", "gpu", "uuid"}
    figures = {(s.labels["key"], s.labels["gpu"], s.labels["unit"]): s.value for s in metrics["opgate_figure"]}
    assert figures[("planted.flapping.planted_temperature", "0", "C")] == 91.0
    assert figures[("planted.bandwidth.hbm_read_planted", "", "TB/s")] == 4.5
    assert {s.labels["level"] for s in metrics["opgate_last_run_timestamp_seconds"]} == {"basic"}
    assert metrics["opgate_last_run_duration_seconds"][0].value > 0
    assert metrics["opgate_ready"][0].value == 2
    assert any(s.name == "opgate_runs_total" and s.value >= 1 for s in metrics["opgate_runs"])
    assert {(s.labels["kind"], s.value) for s in metrics["opgate_exporter_errors"] if s.name.endswith("_total")} == \
        {("scheduler", 0.0), ("label", 0.0)}

    code, body = fetch(f"{base}/report.json")
    document = json.loads(body)  # the document --json writes (opgate.reporting.schema)
    assert code == 200 and document["verb"] == "doctor" and document["schema_version"] == 2
    assert fetch(f"{base}/healthz")[0] == 200

    flap.write_text("pass")  # the fault goes away: the next run must clear it
    recovered = wait_until(lambda: (m := scrape(base)) and outcome_of(m, "planted.flapping") == 0 and m)
    figures = {(s.labels["key"], s.labels["gpu"]): s.value for s in recovered["opgate_figure"]}
    assert figures[("planted.flapping.planted_temperature", "0")] == 40.0
    assert recovered["opgate_ready"][0].value == 0


def test_run_on_demand_and_bad_requests(exporter: tuple[str, Path]) -> None:
    base, _ = exporter
    assert fetch(f"{base}/run?level=basic", data=b"")[0] == 202
    assert fetch(f"{base}/run?level=extreme", data=b"")[0] == 400
    assert fetch(f"{base}/nothing-here")[0] == 404
    # the standard run (no GPU here: its probes are not registered by --check, it runs the same two checks)
    assert fetch(f"{base}/run?level=standard", data=b"")[0] == 202
    levels = wait_until(lambda: {s.labels["level"] for s in scrape(base).get("opgate_last_run_timestamp_seconds", [])}
                        >= {"basic", "standard"})
    assert levels


def test_once_mode_prints_the_ready_label_and_exits_with_the_doctors_code(fleet_env: dict[str, str],
                                                                         tmp_path: Path) -> None:
    flap = tmp_path / "flap"
    flap.write_text("fail")
    args = [sys.executable, "-m", "opgate", "serve", "--once", "basic", "--check", "planted_flapping"]
    env = {**fleet_env, "OPGATE_PLANTED_FLAP_FILE": str(flap)}
    failing = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert failing.returncode == 1 and "opgate.io/ready=fail" in failing.stdout, failing.stdout + failing.stderr
    flap.write_text("pass")
    passing = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert passing.returncode == 0 and "opgate.io/ready=pass" in passing.stdout


def test_a_port_in_use_is_one_line_exit_2(fleet_env: dict[str, str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "opgate", "serve", "--port", str(port)], env=fleet_env,
                             cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr and f"--port {port}" in out.stderr
    unknown = subprocess.run([sys.executable, "-m", "opgate", "serve", "--check", "no_such_check"], env=fleet_env,
                             cwd=REPO, capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "no_such_check" in unknown.stderr


def test_require_gpu_fails_a_pod_that_sees_no_gpu_instead_of_passing_on_skips(fleet_env: dict[str, str]) -> None:
    """The chart sets OPGATE_REQUIRE_GPU on its GPU-node pods: without the NVIDIA runtime a pod sees no GPU, every
    GPU check skips, and the node was labelled ready=pass (found building the image, no GPU in the container)."""
    from opgate.cli.policy import gpu_missing_reason

    if gpu_missing_reason() is None:
        pytest.skip("a GPU is visible here: the check passes, which the GPU tests cover")
    args = [sys.executable, "-m", "opgate", "serve", "--once", "basic", "--check", "gpu_inventory"]
    plain = subprocess.run(args, env=fleet_env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0 and "opgate.io/ready=pass" in plain.stdout, plain.stdout + plain.stderr
    required = subprocess.run(args, env={**fleet_env, "OPGATE_REQUIRE_GPU": "1"}, cwd=REPO, capture_output=True,
                              text=True, timeout=120)
    assert required.returncode == 1 and "opgate.io/ready=fail" in required.stdout, required.stdout + required.stderr
