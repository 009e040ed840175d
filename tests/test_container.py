from __future__ import annotations

from pathlib import Path

import pytest
from opgate_testing import DATA

from opgate.gpu.judge.container import judge_container
from opgate.probes.container import (ContainerFacts, DeviceNode, detect_runtime, parse_proc_cgroup,
                                     parse_visible_devices, read_cgroup)
from opgate.model.results import Outcome

LAYOUTS = DATA / "cgroup"


def test_cgroup_v2_with_limits() -> None:
    info = read_cgroup(LAYOUTS / "v2-limited")
    assert info.version == "v2"
    assert info.memory_limit_bytes == 8 * 2**30
    assert info.cpu_limit_cores == 2.5


def test_cgroup_v2_unlimited_nested_path() -> None:
    info = read_cgroup(LAYOUTS / "v2-unlimited")
    assert info.version == "v2" and info.memory_limit_bytes is None and info.cpu_limit_cores is None
    assert info.memory_path == "/kubepods.slice/pod1234"


def test_cgroup_v1_with_limits() -> None:
    info = read_cgroup(LAYOUTS / "v1-limited")
    assert info.version == "v1"
    assert info.memory_limit_bytes == 4 * 2**30
    assert info.cpu_limit_cores == 1.5


def test_cgroup_hybrid_recorded_from_this_dev_machine() -> None:
    info = read_cgroup(LAYOUTS / "hybrid-dev-machine")
    assert info.version == "hybrid"
    assert info.memory_limit_bytes is None  # 9223372036854771712 = no limit
    assert info.memory_path.startswith("/process_api/")


def test_this_machine_real_cgroup_files_parse() -> None:
    info = read_cgroup(Path("/"))
    assert info.version in ("v1", "v2", "hybrid", "none")
    if info.version == "v2" and Path("/sys/fs/cgroup/memory.max").exists():
        raw = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        assert info.memory_limit_bytes == (None if raw == "max" else int(raw))


def test_runtime_detection_from_recorded_layouts() -> None:
    assert detect_runtime(LAYOUTS / "v2-unlimited", environ={})[0] == "kubernetes"
    assert detect_runtime(LAYOUTS / "v1-limited", environ={})[0] == "docker"
    assert detect_runtime(LAYOUTS / "v2-limited", environ={"container": "podman"})[0] == "podman"


def test_parse_proc_cgroup() -> None:
    paths = parse_proc_cgroup("4:memory:/a\n2:cpu,cpuacct:/b\n0::/c\n")
    assert paths == {"memory": "/a", "cpu": "/b", "cpuacct": "/b", "": "/c"}


@pytest.mark.parametrize(("value", "expected"), [(None, None), ("all", None), ("none", []), ("void", []),
                                                 ("0,1", ["0", "1"]), ("GPU-abc", ["GPU-abc"])])
def test_visible_devices(value, expected) -> None:
    assert parse_visible_devices(value) == expected


def node(path: str, minor: int, openable: bool = True) -> DeviceNode:
    return DeviceNode(path, 195, minor, "crw-rw-rw-", openable)


def facts(gpus: int, nvidia_visible: str | None, runtime: str = "docker", dev_char_missing=None, **ctl) -> ContainerFacts:
    from opgate.probes.container import CgroupInfo

    control = {"nvidiactl": node("/dev/nvidiactl", 255), "nvidia-uvm": DeviceNode("/dev/nvidia-uvm", 510, 0,
                                                                                 "crw-rw-rw-", True)}
    control.update(ctl)
    return ContainerFacts(runtime, [], CgroupInfo("v2", None, None), [node(f"/dev/nvidia{i}", i) for i in range(gpus)],
                          control, dev_char_missing or [], nvidia_visible, None)


def test_isolation_escape_fails() -> None:
    outcome, findings = judge_container(facts(8, "0,1"), nvml_gpu_count=8)
    assert outcome is Outcome.FAILED
    assert any("isolation escape" in f for f in findings)


def test_allocated_gpus_only_passes() -> None:
    assert judge_container(facts(2, "0,1"), nvml_gpu_count=2)[0] is Outcome.PASSED


def test_missing_control_nodes() -> None:
    outcome, findings = judge_container(facts(1, None, nvidiactl=None), nvml_gpu_count=1)
    assert outcome is Outcome.FAILED and "nvidiactl is missing" in findings[0]
    outcome, findings = judge_container(facts(1, None, **{"nvidia-uvm": None}), nvml_gpu_count=1)
    assert outcome is Outcome.WARNED


def test_missing_dev_char_links_warn_on_hosts_only() -> None:
    assert judge_container(facts(1, None, runtime="none", dev_char_missing=["/dev/nvidia0"]), 1)[0] is Outcome.WARNED
    assert judge_container(facts(1, None, runtime="docker", dev_char_missing=["/dev/nvidia0"]), 1)[0] is Outcome.PASSED


def test_no_gpu_machine_passes() -> None:
    assert judge_container(facts(0, None), None)[0] is Outcome.PASSED
