"""Shared helpers for opgate's tests (a module of its own: `conftest` names clash across folders)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
TESTS = REPO / "tests"
DATA = TESTS / "data"


def data_module(path: str) -> Any:
    """A tool module kept under tests/data (e.g. "gpu/gpu_recovery": the GPU-session tools outside the CLI,
    planted sanitizer bugs and recovery trials), imported the way it imports its siblings."""
    import importlib

    folder = str((DATA / path).parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(Path(path).name)


def script_module(path: Path, name: str) -> Any:
    """A script (scripts/ is no package) imported as module `name` from its file, registered in sys.modules first:
    dataclasses look their module up while the file executes."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def child_pythonpath() -> str:
    """PYTHONPATH for child processes: this checkout's opgate plus the tests' planted checks."""
    return os.pathsep.join([str(SRC), str(TESTS), os.environ.get("PYTHONPATH", "")])


def gpu_available() -> tuple[bool, str]:
    """(whether NVML sees a GPU, why not): opgate's own gate, asked of NVML only (no CUDA context here)."""
    from opgate.gpu.probes.device import gpu_unavailable_reason

    reason = gpu_unavailable_reason(runtime=False)
    return reason is None, reason or ""


def interpreted_child_json(code: str, timeout: float = 240) -> Any:
    """Run `code` in a child under Triton's CPU interpreter (chosen when triton is imported, so not in this process)
    and return the JSON of its last line of output."""
    import json

    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(SRC)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_opgate(args: list[str], env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(env or os.environ)
    env.setdefault("PYTHONPATH", child_pythonpath())
    return subprocess.run([sys.executable, "-m", "opgate", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=REPO)


def source_key_problems(results: Any) -> list[str]:
    """Each figure of `results` without a key set where it was made, or whose key or labels differ from what
    opgate.reporting.metrics derives from its check id and prose name (the keys reports were written with
    before figures were keyed at the source: the contract, issue #29)."""
    import dataclasses

    from opgate.reporting.metrics import derived_metric_for, metric_for

    problems = []
    for result in results:
        bare = dataclasses.replace(result, stage="", labels={})  # what the derivation saw: no planned identity
        for figure in result.figures:
            where = f"{result.check_id}: {figure.name!r}"
            if not figure.key:
                problems.append(f"{where} has no key set at its source")
                continue
            source = metric_for(result, figure)
            derived = derived_metric_for(bare, dataclasses.replace(figure, key="", labels={}))
            if (source.key, dict(source.labels)) != (derived.key, dict(derived.labels)):
                problems.append(f"{where}: source {source.key} {dict(source.labels)}, derived {derived.key} "
                                f"{dict(derived.labels)}")
    return problems
