"""`opgate fleet doctor` across a real local Ray cluster of four nodes on this machine: one node
killed mid-run is an error row (the other nodes' answers kept), a planted outlier node is flagged by
the fleet baseline, and the merged report has every verb's formats."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterator

import pytest
from fleet_testing import HERE, planted_dist
from opgate_testing import REPO, child_pythonpath
from ray_cluster import QUIET_ENV, LocalRayCluster

pytestmark = [pytest.mark.slow, pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                                   reason="Ray is not installed (opgate[fleet])")]

NODE_TBS = {"head": "4.50", "node-b": "4.52", "node-c": "4.10", "node-d": "4.49"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRayCluster]:
    plugins = planted_dist(tmp_path_factory.mktemp("plugins"))
    pidfile = tmp_path_factory.mktemp("doomed") / "check.pid"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(plugins), str(HERE), child_pythonpath()])
    ray_cluster = LocalRayCluster(base_env=env)
    times = tmp_path_factory.mktemp("times") / "runs.txt"
    node_envs = {name: {"OPGATE_PLANTED_TBS": tbs, "OPGATE_PLANTED_TIMES": str(times)}
                 for name, tbs in NODE_TBS.items()}
    # node-d is the one that dies: its check announces itself, then waits to be killed with its node.
    node_envs["node-d"].update({"OPGATE_PLANTED_SLEEP_S": "90", "OPGATE_PLANTED_PIDFILE": str(pidfile)})
    try:
        ray_cluster.start(node_envs)
        ray_cluster.pidfile = pidfile  # type: ignore[attr-defined]
        ray_cluster.env = env  # type: ignore[attr-defined]
        ray_cluster.times = times  # type: ignore[attr-defined]
        yield ray_cluster
    finally:
        ray_cluster.stop()


def fleet(cluster: LocalRayCluster, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "opgate", "fleet", "doctor", "--address", cluster.address,
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**cluster.env, **QUIET_ENV}, cwd=REPO)  # type: ignore[attr-defined]


def test_a_node_killed_mid_run_is_an_error_row_and_the_outlier_is_flagged(cluster: LocalRayCluster,
                                                                          tmp_path: Path) -> None:
    report_path, junit_path = tmp_path / "fleet.json", tmp_path / "fleet.xml"
    run = fleet(cluster, "--check", "planted_bandwidth", "--json", str(report_path), "--junit", str(junit_path),
                "--node-timeout", "120")
    pidfile: Path = cluster.pidfile  # type: ignore[attr-defined]
    deadline = time.monotonic() + 90
    while not pidfile.is_file() and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.2)
    assert pidfile.is_file(), "node-d's check never started"
    cluster.kill_node("node-d")
    os.kill(int(pidfile.read_text()), signal.SIGKILL)  # the check's own process (its runner gave it a session)
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 3, stdout + stderr  # an error row and no failure: exit 3

    report = json.loads(report_path.read_text())
    nodes = {n["node"]: n for n in report["extra"]["nodes"]}
    assert set(nodes) == set(NODE_TBS), "every node asked is answered"
    assert report["extra"]["nodes"][0]["node"] == "node-d", "the failed node comes first"
    assert nodes["node-d"]["outcome"] == "error" and "lost mid-run" in nodes["node-d"]["error"]
    for name in ("head", "node-b", "node-c"):
        assert nodes[name]["outcome"] == "passed", nodes[name]
    rows = {r["check_id"]: r for r in report["results"]}
    assert rows["node-d:fleet.node"]["outcome"] == "error"
    for name, tbs in NODE_TBS.items():
        if name != "node-d":
            figure = rows[f"{name}:planted.bandwidth"]["figures"][0]
            assert figure["value"] == float(tbs) and figure["unit"] == "TB/s"
    outliers = [r for r in report["results"] if ":fleet.baseline." in r["check_id"]]
    assert [r["check_id"] for r in outliers] == ["node-c:fleet.baseline.planted.bandwidth.hbm_read_planted"]
    assert outliers[0]["outcome"] == "warned"
    assert "9% under this fleet's median" in outliers[0]["reason"] and "(4.5 TB/s, 3 samples)" in outliers[0]["reason"]
    suite = ET.parse(junit_path).getroot().find("testsuite")
    assert suite.get("errors") == "1" and suite.get("tests") == str(len(report["results"]))
    assert "node-d" in stdout and "lost mid-run" in stdout


def test_the_surviving_fleet_warns_of_its_outlier_and_strict_fails_it(cluster: LocalRayCluster,
                                                                      tmp_path: Path) -> None:
    # runs after the kill above: the cluster now has three nodes (the warning alone exits 0: see
    # test_fleet_baseline.py; one Ray run here is enough), one node at a time
    times: Path = cluster.times  # type: ignore[attr-defined]
    times.write_text("")
    run = fleet(cluster, "--check", "planted_bandwidth", "--strict", "--json", str(tmp_path / "r.json"),
                "--markdown", str(tmp_path / "r.md"),
                "--node", "head", "--node", "node-b", "--node", "node-c", "--max-nodes-at-once", "1")
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 1, stdout + stderr
    report = json.loads((tmp_path / "r.json").read_text())
    summary = (tmp_path / "r.md").read_text()  # the fleet's own --markdown, not passed on to the nodes
    assert summary.startswith("## opgate fleet doctor: FAILED") and "`node-c:fleet.baseline." in summary
    assert sorted(n["node"] for n in report["extra"]["nodes"]) == ["head", "node-b", "node-c"]
    assert report["counts"] == {"passed": 3, "warned": 1, "failed": 0, "skipped": 0, "error": 0}
    assert "(--strict: warnings fail)" in stdout
    spans = sorted(tuple(map(float, line.split())) for line in times.read_text().splitlines())
    assert len(spans) == 3 and all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:])), spans
    gone = fleet(cluster, "--node", "node-d")
    _, err = gone.communicate(timeout=120)
    assert gone.returncode == 2 and "'node-d' is not an alive node" in err
