"""Measured isolation / QoS: a latency-sensitive request's latency alone, beside a saturating neighbour
process (time-slicing), with stream priorities, and under MPS with the neighbour capped by
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; and whether CUDA_MPS_PINNED_DEVICE_MEM_LIMIT stops a client taking more memory.

The request (`QosSubject`) is opgate's probe kernel (`doctor.qos`) or one call of a user's implementation at its
perf_dims (the verify stage `opgate.verify.qos_stage`); both go through the same worker modes and the same
judging (`opgate.gpu.judge.qos.judge_modes`).

MPS runs only through a private control daemon started here (own CUDA_MPS_PIPE_DIRECTORY and
CUDA_MPS_LOG_DIRECTORY under a temp dir) and stopped with `quit` afterwards; no compute mode or other card setting
is touched. Each mode runs in child processes (opgate.gpu.probes.qos_worker) so every context is fresh.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODES = ("alone", "time_sliced", "priority", "mps")
MODE_MIN_S = 15.0
MPS_CONTROL = "nvidia-cuda-mps-control"
WORKER_MODULE = "opgate.gpu.probes.qos_worker"


@dataclass(frozen=True)
class QosSubject:
    """What the latency-sensitive side runs: `worker_args` select it in the worker `worker_module` (opgate's probe
    kernel: opgate.gpu.probes.qos_worker; an operator: opgate.verify.qos_worker, the same worker with the operator
    request, `opgate.verify.qos_worker.operator_subject`); `word` names it in figures ("alone probe p95", "mps
    operator p95")."""

    label: str
    word: str
    worker_args: tuple[str, ...]
    worker_module: str = WORKER_MODULE


def probe_kernel_subject(probe_us: float = 50.0) -> QosSubject:
    return QosSubject(f"probe kernel ({probe_us:g} us on 8 blocks)", "probe",
                      ("--subject", "kernel", "--probe-us", str(probe_us)))


@dataclass(frozen=True)
class ModeResult:
    mode: str
    latencies_us: tuple[float, ...] = ()
    unavailable: str = ""  # why this mode was not measured
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "latencies_us": [round(v, 2) for v in self.latencies_us],
                "unavailable": self.unavailable, "details": self.details}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModeResult":
        return cls(data["mode"], tuple(data.get("latencies_us", ())), data.get("unavailable", ""),
                   dict(data.get("details", {})))


@dataclass(frozen=True)
class QosMeasurement:
    device: str
    probe_us: float
    neighbour_thread_percent: int
    modes: tuple[ModeResult, ...]
    pinned_limit_mb: int
    pinned_allocated_mb: int | None  # what a client under the limit could allocate (None: not measured)
    pinned_note: str
    duration_s: float
    subject: str = "probe kernel"

    def mode(self, name: str) -> ModeResult | None:
        return next((m for m in self.modes if m.mode == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "probe_us": self.probe_us,
                "neighbour_thread_percent": self.neighbour_thread_percent,
                "modes": [m.to_dict() for m in self.modes], "pinned_limit_mb": self.pinned_limit_mb,
                "pinned_allocated_mb": self.pinned_allocated_mb, "pinned_note": self.pinned_note,
                "duration_s": round(self.duration_s, 2), "subject": self.subject}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "QosMeasurement":
        return cls(data["device"], float(data["probe_us"]), int(data["neighbour_thread_percent"]),
                   tuple(ModeResult.from_dict(m) for m in data["modes"]), int(data["pinned_limit_mb"]),
                   data.get("pinned_allocated_mb"), data.get("pinned_note", ""), float(data.get("duration_s", 0)),
                   data.get("subject", "probe kernel"))


def _child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    import opgate

    env = dict(os.environ)
    src = str(Path(opgate.__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


def _worker(mode: str, args: list[str], module: str = WORKER_MODULE) -> list[str]:
    return [sys.executable, "-m", module, mode, *args]


def _last_json(text: str) -> dict[str, Any]:
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    return {"error": f"no result from the worker: {text.strip()[-300:]!r}"}


def _run(mode: str, args: list[str], env: dict[str, str], timeout_s: float, module: str = WORKER_MODULE
         ) -> dict[str, Any]:
    try:
        done = subprocess.run(_worker(mode, args, module), capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"{mode} worker ran past {timeout_s:.0f} s"}
    result = _last_json(done.stdout)
    if done.returncode and "error" not in result:
        result["error"] = f"exit {done.returncode}: {done.stderr.strip()[-300:]}"
    return result


class Neighbour:
    """A saturating hog process; started, waited for until it runs, stopped by closing its stdin (then by pid)."""

    def __init__(self, args: list[str], env: dict[str, str], ready_timeout_s: float = 90.0) -> None:
        self.process = subprocess.Popen(_worker("hog", args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=env)
        self.error = ""
        ready, _, _ = select.select([self.process.stdout], [], [], ready_timeout_s)
        line = self.process.stdout.readline() if ready else ""
        if '"ready"' not in line:
            self.error = f"the neighbour did not start: {line.strip() or 'no output in time'}"

    def stop(self) -> dict[str, Any]:
        try:  # communicate() closes stdin: the hog's signal to stop
            out, err = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()  # this process only, by its own handle
            out, err = self.process.communicate(timeout=10)
        result = _last_json(out or "")
        if self.process.returncode and "error" not in result:
            result["error"] = (err or "").strip()[-300:]
        return result


def _probe_mode(name: str, probe_args: list[str], env: dict[str, str], neighbour: Neighbour | None,
                timeout_s: float, module: str = WORKER_MODULE) -> ModeResult:
    if neighbour is not None and neighbour.error:
        neighbour.stop()
        return ModeResult(name, unavailable=neighbour.error)
    result = _run("probe", probe_args, env, timeout_s, module)
    hog = neighbour.stop() if neighbour is not None else {}
    if "error" in result:
        return ModeResult(name, unavailable=result["error"], details={"neighbour": hog})
    details = {"neighbour": hog, **({"request": result["request"]} if "request" in result else {})}
    return ModeResult(name, tuple(result["latencies_us"]), details=details)


def mps_control(env: dict[str, str], command: str, timeout_s: float = 15.0) -> str:
    done = subprocess.run([MPS_CONTROL], input=command + "\n", capture_output=True, text=True, env=env,
                          timeout=timeout_s)
    return (done.stdout + done.stderr).strip()


def _mps_modes(common: list[str], hog_args: list[str], neighbour_percent: int, pinned_limit_mb: int,
               timeout_s: float, module: str = WORKER_MODULE) -> tuple[ModeResult, int | None, str]:
    """The MPS mode under a private daemon; then, when `pinned_limit_mb` > 0, how much a client under
    CUDA_MPS_PINNED_DEVICE_MEM_LIMIT can allocate."""
    from opgate.probes.processes import MPS_PROCESS_NAMES, find_processes

    if shutil.which(MPS_CONTROL) is None:
        return ModeResult("mps", unavailable=f"{MPS_CONTROL} is not on PATH"), None, "MPS not available"
    if MPS_PROCESS_NAMES[0] in find_processes(MPS_PROCESS_NAMES):
        reason = "an MPS control daemon already serves this host; opgate does not start a second one"
        return ModeResult("mps", unavailable=reason), None, reason
    root = Path(tempfile.mkdtemp(prefix="opgate-mps-"))
    env = _child_env({"CUDA_MPS_PIPE_DIRECTORY": str(root / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(root / "log")})
    (root / "pipe").mkdir()
    (root / "log").mkdir()
    started = False
    try:
        start = subprocess.run([MPS_CONTROL, "-d"], capture_output=True, text=True, env=env, timeout=15)
        if start.returncode:
            reason = f"{MPS_CONTROL} -d failed: {(start.stdout + start.stderr).strip()[:200]}"
            return ModeResult("mps", unavailable=reason), None, reason
        started = True
        neighbour = Neighbour(hog_args, {**env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(neighbour_percent)},
                              timeout_s)
        result = _probe_mode("mps", common, env, neighbour, timeout_s, module)
        servers = mps_control(env, "get_server_list")
        details = dict(result.details)
        details["mps_servers"] = servers
        details["neighbour_thread_percent"] = neighbour_percent
        if pinned_limit_mb <= 0:
            return ModeResult("mps", result.latencies_us, result.unavailable, details), None, "not measured here"
        alloc = _run("alloc", ["--chunk-mb", "256", "--target-mb", str(pinned_limit_mb * 3)],
                     {**env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={pinned_limit_mb}M"}, timeout_s)
        if "error" in alloc and "allocated_mb" not in alloc:
            allocated, note = None, f"allocation probe failed: {alloc['error']}"
        else:
            allocated = int(alloc["allocated_mb"])
            note = f"client limited to {pinned_limit_mb} MB allocated {allocated} MB" + (
                f" (stopped by: {alloc['error']})" if alloc.get("error") else " (no allocation failed)")
        return ModeResult("mps", result.latencies_us, result.unavailable, details), allocated, note
    finally:
        if started:
            try:
                mps_control(env, "quit")
            except (OSError, subprocess.TimeoutExpired):
                pass
            time.sleep(0.5)
        shutil.rmtree(root, ignore_errors=True)


def measure_qos(device: int = 0, samples: int = 300, probe_us: float = 50.0, neighbour_percent: int = 50,
                pinned_limit_mb: int = 1024, with_mps: bool = True, timeout_s: float = 40.0,
                budget_s: float = 150.0, subject: QosSubject | None = None) -> QosMeasurement:
    """Every mode in turn for `subject` (default: the probe kernel of `probe_us`); a mode that would start with
    less than MODE_MIN_S of `budget_s` left is reported as not measured, so the whole probe (and the MPS daemon's
    stop) stays inside the caller's time limit. `pinned_limit_mb` 0: no pinned-memory allocation test."""
    from opgate.gpu.probes.device import device_info, require_gpu

    started = time.perf_counter()
    require_gpu()
    info = device_info(device)
    subject = subject or probe_kernel_subject(probe_us)
    common = ["--device", str(device), "--samples", str(samples), *subject.worker_args]
    hog_args = ["--device", str(device), "--duration-s", "60"]
    env = _child_env()

    def left() -> float:
        return budget_s - (time.perf_counter() - started)

    def step_timeout() -> float:
        return max(5.0, min(timeout_s, left() / 3))

    def out_of_time(name: str) -> ModeResult:
        return ModeResult(name, unavailable=f"not measured: less than {MODE_MIN_S:.0f} s of the {budget_s:.0f} s "
                                            "budget left")

    module = subject.worker_module
    modes = [_probe_mode("alone", common, env, None, step_timeout(), module)]
    modes.append(_probe_mode("time_sliced", common, env, Neighbour(hog_args, env, step_timeout()), step_timeout(),
                             module) if left() > MODE_MIN_S else out_of_time("time_sliced"))
    if left() > MODE_MIN_S:
        prio = _run("priority", common, env, step_timeout(), module)
        modes.append(ModeResult("priority", tuple(prio.get("latencies_us", ())), prio.get("error", ""),
                                {k: v for k, v in prio.items() if k not in ("latencies_us", "error")}))
    else:
        modes.append(out_of_time("priority"))
    allocated, note = None, "MPS not measured"
    if not with_mps:
        modes.append(ModeResult("mps", unavailable="MPS measurement not requested"))
    elif left() > 2 * MODE_MIN_S:
        mps, allocated, note = _mps_modes(common, hog_args, neighbour_percent, pinned_limit_mb, step_timeout(),
                                          module)
        modes.append(mps)
    else:
        modes.append(out_of_time("mps"))
    return QosMeasurement(info.name, probe_us, neighbour_percent, tuple(modes), pinned_limit_mb, allocated, note,
                          time.perf_counter() - started, subject.label)

