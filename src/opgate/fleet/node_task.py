"""What one fleet task does on its node: run the single-host verb exactly as a user would
(`python -m opgate VERB ... --json FILE`, every check in its own isolated child as always) and hand
back the node's identity and its versioned report. Plain data in and out, so it crosses Ray."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

STDERR_TAIL_CHARS = 2000


@dataclass(frozen=True)
class NodeOutcome:
    """One node's answer. `report` is a RunReport dict (schema 1), None when the verb wrote none."""

    node: str
    hostname: str
    gpus: list[dict[str, Any]]
    driver: str
    exit_code: int
    duration_s: float
    report: dict[str, Any] | None = None
    error: str = ""
    stderr_tail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "NodeOutcome":
        return cls(**data)


def gpu_identities() -> tuple[list[dict[str, Any]], str]:
    """(GPUs as {index, model, uuid, driver}, driver version) read through NVML; empty without a driver."""
    try:
        from opgate.probes.gpu_inventory import collect_inventory

        inventory = collect_inventory()
    except Exception:  # no NVML / driver here: a CPU node; the doctor's own checks say why
        return [], ""
    gpus = [{"index": g.index, "model": g.name, "uuid": g.uuid, "driver": inventory.driver_version}
            for g in inventory.gpus]
    return gpus, str(inventory.driver_version)


def run_verb_on_node(node: str, verb_args: Sequence[str], timeout_s: float) -> dict[str, Any]:
    """Run `opgate VERB_ARGS --json` here; always returns a NodeOutcome dict, never raises."""
    started = time.perf_counter()
    gpus, driver = gpu_identities()
    from opgate.engine.workdirs import owned_workdir

    with owned_workdir("opgate-fleet-") as tmp:  # records its owner; sweeps killed nodes' folders
        report_path = tmp / "report.json"
        command = [sys.executable, "-m", "opgate", *verb_args, "--json", str(report_path)]
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # the same opgate the task imported
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        error, code, stderr = "", -1, ""
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env,
                                  stdin=subprocess.DEVNULL)
            code, stderr = proc.returncode, (proc.stderr or "")[-STDERR_TAIL_CHARS:]
        except subprocess.TimeoutExpired as exc:
            error = f"opgate {verb_args[0]} did not finish within {timeout_s:g} s on this node and was killed"
            stderr = (exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or ""))
        except OSError as exc:
            error = f"could not start opgate on this node: {exc}"
        report = None
        if report_path.is_file():
            try:
                report = json.loads(report_path.read_text())
            except ValueError as exc:
                error = error or f"the node's report is unreadable: {exc}"
        elif not error:
            last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit code {code}"
            error = f"opgate {verb_args[0]} wrote no report (exit code {code}): {last}"
    return NodeOutcome(node=node, hostname=socket.gethostname(), gpus=gpus, driver=driver, exit_code=code,
                       duration_s=time.perf_counter() - started, report=report, error=error,
                       stderr_tail=stderr[-STDERR_TAIL_CHARS:]).to_dict()
