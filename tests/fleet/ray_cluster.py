"""A real multi-node Ray cluster on this one machine: `ray start --head` plus `ray start --address`
worker nodes, each a `--block`ed process in its own session so that one node can be killed alone
(its process group) and every process started here is stopped by id at teardown."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))
START_ATTEMPTS = 3
OBJECT_STORE_BYTES = 80 * 1000 * 1000  # Ray's floor is 75 MB
# Detect a dead node in ~2 s instead of Ray's default ~30 s (health checks are GCS settings).
# Generous timeouts still: two cores run four nodes, and a slow answer must not read as a death.
FAST_DEATH_ENV = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "3000",
                  "RAY_health_check_failure_threshold": "3"}


# No usage stats; no token auth: Ray >= 2.5x turns it on by itself once ~/.ray/auth_token exists (any
# earlier local ray.init() writes one), and then a driver without the token cannot connect.
QUIET_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int, taken: tuple[int, ...] = ()) -> list[int]:
    """`count` free ports, distinct from each other and from `taken`: every socket stays bound until all are read.
    Asked one at a time, a port released at once can be handed out again: two of a node's ports came out equal
    and Ray refused to start ("runtime_env_agent is trying to use a port number 43573 that is used by other
    components", a fresh clone's make test, thirty-fifth session)."""
    sockets: list[socket.socket] = []
    try:
        ports: list[int] = []
        while len(ports) < count:
            s = socket.socket()
            sockets.append(s)
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
            if port not in taken:
                ports.append(port)
        return ports
    finally:
        for s in sockets:
            s.close()


@dataclass
class LocalRayCluster:
    base_env: dict[str, str]
    temp_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ogray-", dir="/tmp")))
    port: int = field(default_factory=free_port)
    nodes: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, name: str, head: bool, node_env: dict[str, str]) -> None:
        listen, grpc, runtime_env, metrics, node_manager, object_manager = free_ports(6, taken=(self.port,))
        args = [RAY, "start", "--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1",
                "--num-cpus=1", "--num-gpus=0", f"--object-store-memory={OBJECT_STORE_BYTES}",
                f"--resources={json.dumps({f'opgate_node_{name}': 1})}",
                f"--dashboard-agent-listen-port={listen}", f"--dashboard-agent-grpc-port={grpc}",
                f"--runtime-env-agent-port={runtime_env}", f"--metrics-export-port={metrics}",
                f"--node-manager-port={node_manager}", f"--object-manager-port={object_manager}"]
        if head:
            args += ["--head", f"--port={self.port}", "--include-dashboard=false",
                     f"--temp-dir={self.temp_dir}"]
        else:
            args += [f"--address={self.address}"]
        env = {**self.base_env, **(FAST_DEATH_ENV if head else {}), **QUIET_ENV, **node_env}
        with open(self.temp_dir / f"{name}.log", "wb") as log:
            self.nodes[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)

    def start(self, node_envs: dict[str, dict[str, str]], timeout_s: float = 90.0) -> None:
        names = list(node_envs)
        self._start(names[0], True, node_envs[names[0]])
        self.wait_started(names[0], timeout_s)
        for name in names[1:]:  # one at a time: two cores, one GCS
            for attempt in range(START_ATTEMPTS):
                self._start(name, False, node_envs[name])
                try:
                    self.wait_started(name, timeout_s)
                    break
                except RuntimeError:
                    # `ray start` gives a raylet 30 s (hard-coded) to register; on a loaded 2-core machine
                    # that can pass. Clear what the attempt left and start the node again.
                    self.kill_node(name)
                    if attempt == START_ATTEMPTS - 1:
                        raise
        self.wait_for(len(names), timeout_s)  # and the cluster itself agrees

    def wait_started(self, name: str, timeout_s: float) -> None:
        """`ray start` logs "Ray runtime started." once its node has registered with the GCS."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.nodes[name].poll() is not None:
                raise RuntimeError(f"ray node {name} exited: {self.log(name)[-2000:]}")
            if "Ray runtime started" in self.log(name):
                return
            time.sleep(0.3)
        raise TimeoutError(f"Ray node {name} did not start in {timeout_s:g} s: {self.log(name)[-2000:]}")

    def alive_count(self) -> int:
        code = ("import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False); "
                "print(sum(1 for n in ray.nodes() if n['Alive']))")
        try:
            out = subprocess.run([sys.executable, "-c", code, self.address], capture_output=True, text=True,
                                 timeout=20, env={**self.base_env, **QUIET_ENV})
        except subprocess.TimeoutExpired:
            return 0
        return int(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else 0

    def wait_for(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [n for n, p in self.nodes.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"ray node {dead[0]} exited: {self.log(dead[0])[-2000:]}")
            if self.alive_count() >= count:
                return
            time.sleep(1.0)
        raise TimeoutError(f"{count} Ray nodes did not come up in {timeout_s:g} s")

    def log(self, name: str) -> str:
        return (self.temp_dir / f"{name}.log").read_text(errors="replace")

    def kill_node(self, name: str) -> None:
        """SIGKILL the node's whole session: raylet, agents, and its workers (Ray gives each worker a
        process group of its own, but they stay in the session of the `ray start` that began the node)."""
        proc = self.nodes[name]
        for pid in [proc.pid, *self._session_members(proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=30)

    @staticmethod
    def _session_members(sid: int) -> list[int]:
        members = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getsid(int(entry.name)) == sid:
                        members.append(int(entry.name))
                except OSError:
                    continue
        return members

    def _leftover_pids(self) -> list[int]:
        """Processes of this cluster that left its process groups (found by its private temp dir)."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(self.temp_dir) in cmdline:
                pids.append(int(entry.name))
        return pids

    def stop(self) -> None:
        for name in reversed(list(self.nodes)):
            self.kill_node(name)
        for pid in self._leftover_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.temp_dir, ignore_errors=True)
