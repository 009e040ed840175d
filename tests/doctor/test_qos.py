"""doctor.qos: the pure judgement on measurements (CPU), the skip without a GPU, the registration; the GPU run
itself is tests/gpu-marked and scripts/gpu/governance.sh."""

from __future__ import annotations

import random

import pytest

from opgate.checks.base import CheckContext
from opgate.checks.registry import CheckSpec
from opgate.engine.plugins import CHECKS_GROUP, _source_tree_groups
from opgate.doctor.qos import QosCheck
from opgate.gpu.judge.qos import judge_qos
from opgate.gpu.probes.qos import ModeResult, QosMeasurement
from opgate.model.results import Outcome
from opgate_testing import gpu_available


def _samples(center: float, spread: float, n: int = 300, seed: int = 1) -> tuple[float, ...]:
    rng = random.Random(seed)
    return tuple(center + abs(rng.gauss(0, spread)) for _ in range(n))


def _measurement(time_sliced: float, priority: float, mps: float | None, pinned: int | None = 1024):
    modes = [ModeResult("alone", _samples(70, 3)), ModeResult("time_sliced", _samples(time_sliced, 50)),
             ModeResult("priority", _samples(priority, 5))]
    modes.append(ModeResult("mps", _samples(mps, 5)) if mps else ModeResult("mps", unavailable="no daemon"))
    return QosMeasurement("NVIDIA H200", 50.0, 50, tuple(modes), 1024, pinned, "client limited to 1024 MB ...", 30.0)


def test_priority_and_mps_protect_time_slicing_breaks() -> None:
    outcome, reason, figures, _ = judge_qos(_measurement(time_sliced=2500, priority=95, mps=90))
    assert outcome is Outcome.PASSED
    assert "holds under: priority, mps" in reason and "broken under: time_sliced" in reason
    assert "pinned-memory limit enforced" in reason
    p95 = next(f for f in figures if f.name == "time_sliced probe p95")
    assert p95.unit == "us" and p95.threshold is not None and p95.threshold.comparison == "<="


def test_nothing_protects_warns_and_unenforced_limit_warns() -> None:
    outcome, reason, _, remediation = judge_qos(_measurement(time_sliced=2500, priority=1800, mps=None))
    assert outcome is Outcome.WARNED and "holds under: none" in reason and "MIG" in remediation
    outcome, reason, _, _ = judge_qos(_measurement(2500, 95, 90, pinned=3072))
    assert outcome is Outcome.WARNED and "NOT enforced" in reason


def test_declared_slo_below_alone_fails() -> None:
    outcome, reason, _, _ = judge_qos(_measurement(2500, 95, 90), declared_slo_us=20.0)
    assert outcome is Outcome.FAILED and "even alone" in reason


def test_round_trip() -> None:
    m = _measurement(2500, 95, 90)
    assert QosMeasurement.from_dict(m.to_dict()).mode("priority").latencies_us == pytest.approx(
        m.mode("priority").latencies_us, abs=0.01)


def test_registered_standard_only_and_skips_without_gpu() -> None:
    # the tree's pyproject (an installed opgate may predate these checks)
    specs = {n: CheckSpec(n, t) for n, t in _source_tree_groups()[CHECKS_GROUP].items()}
    assert specs["doctor.topology"].load().levels == ("basic", "standard")
    spec = specs["doctor.qos"]
    assert spec.load().levels == ("standard",) and spec.load().exclusive
    ok, reason = gpu_available()
    if ok:
        pytest.skip("a GPU is present: the skip path is not reachable here")
    result = QosCheck().run(CheckContext(level="standard"))
    assert result.outcome is Outcome.SKIPPED and result.reason


@pytest.mark.gpu
def test_qos_on_the_gpu() -> None:
    result = QosCheck().run(CheckContext(level="standard"))
    assert result.outcome in (Outcome.PASSED, Outcome.WARNED), result.reason
    assert any(f.name == "alone probe p95" for f in result.figures)


FAKE_WORKER = """
import json, sys
mode = sys.argv[1]
if mode == "hog":
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.read()  # runs until the parent closes stdin
    print(json.dumps({"hog_kernels": 4, "seconds": 0.1}), flush=True)
elif mode == "probe":
    print("noise before the result")
    print(json.dumps({"latencies_us": [70.0, 71.5, 90.0]}), flush=True)
else:
    print(json.dumps({"error": "RuntimeError: boom"}), flush=True)
    sys.exit(1)
"""


def test_process_plumbing_with_a_stand_in_worker(tmp_path, monkeypatch) -> None:
    """The parent side of the QoS probe (start, ready handshake, stop by closing stdin, JSON results, errors),
    driven through a stand-in worker script; the real worker needs a GPU."""
    import sys

    from opgate.gpu.probes import qos

    script = tmp_path / "worker.py"
    script.write_text(FAKE_WORKER)
    monkeypatch.setattr(qos, "_worker", lambda mode, args, module=qos.WORKER_MODULE: [sys.executable, str(script), mode,
                                                                                     *args])
    env = qos._child_env()
    neighbour = qos.Neighbour([], env, ready_timeout_s=30)
    assert neighbour.error == ""
    result = qos._probe_mode("time_sliced", [], env, neighbour, 30)
    assert result.latencies_us == (70.0, 71.5, 90.0)
    assert result.details["neighbour"] == {"hog_kernels": 4, "seconds": 0.1}
    assert neighbour.process.returncode == 0
    failed = qos._run("priority", [], env, 30)
    assert failed["error"] == "RuntimeError: boom"


def test_mps_mode_without_the_control_binary(monkeypatch) -> None:
    from opgate.gpu.probes import qos

    monkeypatch.setattr(qos, "MPS_CONTROL", "nvidia-cuda-mps-control-not-installed")
    mode, allocated, note = qos._mps_modes([], [], 50, 1024, 10)
    assert mode.unavailable.endswith("is not on PATH") and allocated is None
