"""Container, cgroup and GPU device-node facts. Every reader takes a `root` so tests can point it at
recorded filesystem layouts under tests/data; in production root is "/"."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

UNLIMITED_V1 = 2**62  # cgroup v1 reports "no limit" as a page-rounded 2^63-1


@dataclass(frozen=True)
class CgroupInfo:
    version: str  # "v1", "v2", "hybrid" (v1 controllers + a cgroup2 mount), "none"
    memory_limit_bytes: int | None  # None = unlimited or unknown
    cpu_limit_cores: float | None
    memory_path: str = ""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeviceNode:
    path: str
    major: int
    minor: int
    mode: str  # e.g. "crw-rw-rw-"
    openable: bool
    error: str = ""


@dataclass
class ContainerFacts:
    runtime: str  # "docker", "podman", "kubernetes", "containerd", "lxc", "none", ...
    evidence: list[str]
    cgroup: CgroupInfo
    gpu_nodes: list[DeviceNode]  # /dev/nvidia0, /dev/nvidia1, ...
    control_nodes: dict[str, DeviceNode | None]  # nvidiactl, nvidia-uvm, nvidia-uvm-tools
    dev_char_missing: list[str]  # device nodes with no /dev/char/MAJ:MIN link
    nvidia_visible_devices: str | None
    cuda_visible_devices: str | None
    extra: dict[str, str] = field(default_factory=dict)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """/proc/self/cgroup -> controller -> path. The v2 entry is keyed ""."""
    paths = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(","):
            paths[controller] = parts[2]
    return paths


def _first_existing(root: Path, candidates: list[str]) -> Path | None:
    for candidate in candidates:
        path = root / candidate.lstrip("/")
        if path.exists():
            return path
    return None


def read_cgroup(root: Path = Path("/"), proc_cgroup_text: str | None = None) -> CgroupInfo:
    if proc_cgroup_text is None:
        proc_cgroup_text = _read(root / "proc/self/cgroup") or ""
    paths = parse_proc_cgroup(proc_cgroup_text)
    base = root / "sys/fs/cgroup"
    notes: list[str] = []
    if (base / "cgroup.controllers").exists():
        own = paths.get("", "/")
        mem_file = _first_existing(root, [f"sys/fs/cgroup{own}/memory.max", "sys/fs/cgroup/memory.max"])
        cpu_file = _first_existing(root, [f"sys/fs/cgroup{own}/cpu.max", "sys/fs/cgroup/cpu.max"])
        memory = _read(mem_file) if mem_file else None
        cpu = _read(cpu_file) if cpu_file else None
        memory_limit = int(memory) if memory and memory.isdigit() else None
        cpu_limit = None
        if cpu:
            quota, _, period = cpu.partition(" ")
            if quota.isdigit() and period.isdigit() and int(period) > 0:
                cpu_limit = int(quota) / int(period)
        return CgroupInfo("v2", memory_limit, cpu_limit, own, tuple(notes))
    if (base / "memory").is_dir() or (base / "cpu").is_dir() or (base / "cpu,cpuacct").is_dir():
        version = "hybrid" if (base / "unified").is_dir() else "v1"
        mem_path = paths.get("memory", "/")
        mem_file = _first_existing(root, [f"sys/fs/cgroup/memory{mem_path}/memory.limit_in_bytes",
                                          "sys/fs/cgroup/memory/memory.limit_in_bytes"])
        memory = _read(mem_file) if mem_file else None
        memory_limit = int(memory) if memory and memory.isdigit() and int(memory) < UNLIMITED_V1 else None
        cpu_path = paths.get("cpu", "/")
        cpu_limit = None
        for cpu_dir in ("cpu", "cpu,cpuacct"):
            quota_file = _first_existing(root, [f"sys/fs/cgroup/{cpu_dir}{cpu_path}/cpu.cfs_quota_us",
                                                f"sys/fs/cgroup/{cpu_dir}/cpu.cfs_quota_us"])
            if quota_file is None:
                continue
            quota = _read(quota_file)
            period = _read(quota_file.with_name("cpu.cfs_period_us"))
            if quota and period and quota.lstrip("-").isdigit() and int(quota) > 0 and period.isdigit():
                cpu_limit = int(quota) / int(period)
            break
        return CgroupInfo(version, memory_limit, cpu_limit, mem_path, tuple(notes))
    return CgroupInfo("none", None, None, "", ("no cgroup filesystem under /sys/fs/cgroup",))


def detect_runtime(root: Path = Path("/"), environ: dict[str, str] | None = None,
                   proc_cgroup_text: str | None = None) -> tuple[str, list[str]]:
    """Best evidence of the container runtime, strongest first."""
    environ = dict(os.environ if environ is None else environ)
    evidence = []
    cgroup_text = proc_cgroup_text if proc_cgroup_text is not None else (_read(root / "proc/self/cgroup") or "")
    if environ.get("KUBERNETES_SERVICE_HOST") or "kubepods" in cgroup_text:
        evidence.append("Kubernetes (KUBERNETES_SERVICE_HOST or kubepods cgroup)")
        return "kubernetes", evidence
    if (root / "run/.containerenv").exists():
        return "podman", ["/run/.containerenv exists"]
    if (root / ".dockerenv").exists():
        return "docker", ["/.dockerenv exists"]
    for marker, name in (("docker", "docker"), ("containerd", "containerd"), ("lxc", "lxc"), ("libpod", "podman")):
        if re.search(rf"\b{marker}\b", cgroup_text):
            return name, [f"/proc/self/cgroup mentions {marker}"]
    if environ.get("container"):
        return environ["container"], ["$container is set"]
    if root == Path("/") and shutil.which("systemd-detect-virt"):
        try:
            out = subprocess.run(["systemd-detect-virt", "--container"], capture_output=True, text=True, timeout=5)
            if out.returncode == 0 and out.stdout.strip() not in ("", "none"):
                return out.stdout.strip(), ["systemd-detect-virt --container"]
        except (OSError, subprocess.SubprocessError):
            pass
    return "none", ["no container marker found"]


def _device_node(path: Path) -> DeviceNode | None:
    try:
        info = path.stat()
    except OSError:
        return None
    if not stat.S_ISCHR(info.st_mode):
        return DeviceNode(str(path), 0, 0, stat.filemode(info.st_mode), False, "not a character device")
    try:
        fd = os.open(path, os.O_RDWR)
        os.close(fd)
        openable, error = True, ""
    except OSError as exc:
        openable, error = False, exc.strerror or str(exc)
    return DeviceNode(str(path), os.major(info.st_rdev), os.minor(info.st_rdev), stat.filemode(info.st_mode),
                      openable, error)


def gpu_device_nodes(root: Path = Path("/")) -> list[DeviceNode]:
    nodes = []
    for path in sorted((root / "dev").glob("nvidia[0-9]*"), key=lambda p: int(re.sub(r"\D", "", p.name) or 0)):
        node = _device_node(path)
        if node:
            nodes.append(node)
    return nodes


def missing_dev_char_links(nodes: list[DeviceNode], root: Path = Path("/")) -> list[str]:
    """Device nodes without the /dev/char/MAJ:MIN symlink that systemd and runc rely on; without them a
    `systemctl daemon-reload` can strip GPU access from running containers (NVIDIA container toolkit notes)."""
    missing = []
    for node in nodes:
        if node.major == 0 and node.minor == 0:
            continue
        link = root / "dev/char" / f"{node.major}:{node.minor}"
        if not link.exists():
            missing.append(node.path)
    return missing


def collect_container_facts(root: Path = Path("/")) -> ContainerFacts:
    runtime, evidence = detect_runtime(root)
    gpu_nodes = gpu_device_nodes(root)
    control = {name: _device_node(root / "dev" / name) for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")}
    all_nodes = gpu_nodes + [n for n in control.values() if n]
    return ContainerFacts(
        runtime=runtime,
        evidence=evidence,
        cgroup=read_cgroup(root),
        gpu_nodes=gpu_nodes,
        control_nodes=control,
        dev_char_missing=missing_dev_char_links(all_nodes, root),
        nvidia_visible_devices=os.environ.get("NVIDIA_VISIBLE_DEVICES"),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )


def parse_visible_devices(value: str | None) -> list[str] | None:
    """NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES -> list of ids; None means all (or unset)."""
    if value is None:
        return None
    value = value.strip()
    if value in ("", "all"):
        return None
    if value in ("none", "void", "NoDevFiles"):
        return []
    return [item.strip() for item in value.split(",") if item.strip()]
