"""The layers, read from the source (AST, nothing imported): probes collect, judges decide, reporters render.

- A probe module (opgate/gpu/probes/, opgate/probes/) imports no judge, check, verify or reporting module,
  not even inside a function.
- A judge module (opgate/gpu/judge/) imports no torch, CuPy, CUDA bindings or NVML at module level.
- Nothing in opgate but opgate/probes/nvml.py imports pynvml.
- A doctor module (opgate/doctor/) judges nothing itself: the outcome-deciding functions and tables live in
  opgate/gpu/judge/, which the checks call.
- The GPU jobs that used to exist twice have one home: the old modules are gone.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from opgate_testing import SRC

PACKAGE = SRC / "opgate"
PROBE_DIRS = (PACKAGE / "gpu" / "probes", PACKAGE / "probes")
JUDGE_DIR = PACKAGE / "gpu" / "judge"
DOCTOR_DIR = PACKAGE / "doctor"
NOT_FOR_PROBES = ("opgate.gpu.judge", "opgate.doctor", "opgate.checks", "opgate.verify", "opgate.reporting",
                  "opgate.model.results", "opgate.cli.policy", "opgate.engine.runner", "opgate.analyze")
DEVICE_LIBRARIES = ("torch", "cupy", "cuda", "pynvml", "triton", "numba")
# opgate.engine.children (children die with opgate) and opgate.engine.atomic (the one atomic file write, which a
# collectives rank uses for its result file) are plumbing below every layer and need no exception.


def imported_modules(tree: ast.AST, top_level_only: bool = False) -> list[tuple[int, str]]:
    """(line, module) for every import in `tree` (only the module body's when top_level_only)."""
    nodes = tree.body if top_level_only and isinstance(tree, ast.Module) else list(ast.walk(tree))
    found: list[tuple[int, str]] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def modules_in(*folders: Path) -> list[Path]:
    return sorted(p for folder in folders for p in folder.rglob("*.py"))


def test_the_layers_exist() -> None:
    assert modules_in(*PROBE_DIRS) and modules_in(JUDGE_DIR)


@pytest.mark.parametrize("path", modules_in(*PROBE_DIRS), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_probe_imports_no_judge_check_or_reporter(path: Path) -> None:
    wrong = [f"line {line}: {module}" for line, module in imported_modules(parsed(path))
             if within(module, NOT_FOR_PROBES)]
    assert not wrong, f"{path.relative_to(PACKAGE)} reaches above the probe layer: {wrong}"


@pytest.mark.parametrize("path", modules_in(JUDGE_DIR), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_judge_imports_no_device_library_at_module_level(path: Path) -> None:
    wrong = [f"line {line}: {module}" for line, module in imported_modules(parsed(path), top_level_only=True)
             if within(module, DEVICE_LIBRARIES)]
    assert not wrong, f"{path.relative_to(PACKAGE)} needs a device library to import: {wrong}"


def names_an_outcome(node: ast.AST | None) -> bool:
    """Whether an annotation or expression names Outcome (a member, the type) or a *Verdict type."""
    for sub in ast.walk(node) if node is not None else ():
        name = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else None
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            name = sub.value  # a quoted annotation
        if name and ("Outcome" in name or name.endswith("Verdict")):
            return True
    return False


def judging_defined(tree: ast.Module) -> list[str]:
    """What in a module decides outcomes itself: a top-level function named judge*/*_verdict, any function or method
    annotated to return an Outcome or a *Verdict, a module-level table of Outcomes."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and names_an_outcome(node.returns):
            found.append(f"line {node.lineno}: {node.name}() returns an outcome")
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                node.name.startswith("judge") or node.name.endswith("_verdict")):
            found.append(f"line {node.lineno}: {node.name}() is named as a judge")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and names_an_outcome(node.value):
            found.append(f"line {node.lineno}: a module-level table of outcomes")
    return sorted(set(found))


@pytest.mark.parametrize("path", modules_in(DOCTOR_DIR), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_doctor_module_judges_through_gpu_judge(path: Path) -> None:
    """A doctor check collects (through probes), calls a judge in opgate/gpu/judge/ and returns its CheckResult; a
    function that turns figures into an outcome is a judge and lives there, where recorded figures test it."""
    wrong = judging_defined(parsed(path))
    assert not wrong, f"{path.relative_to(PACKAGE)} judges outside opgate/gpu/judge/: {wrong}"


def test_only_the_nvml_probe_imports_pynvml() -> None:
    wrong = [f"{path.relative_to(PACKAGE)}:{line}" for path in modules_in(PACKAGE)
             if path != PACKAGE / "probes" / "nvml.py"
             for line, module in imported_modules(parsed(path)) if within(module, ("pynvml",))]
    assert not wrong, f"NVML opened outside opgate/probes/nvml.py: {wrong}"


@pytest.mark.parametrize("old", [
    "measure/timing.py", "measure/graph_capture.py", "gpu/stats.py", "gpu/timing.py", "gpu/recovery.py",
    "gpu/recovery_worker.py", "gpu/planted.py", "gpu/judge.py", "gpu/sanitizer.py", "gpu/device.py",
    "gpu/qos.py", "gpu/qos_worker.py", "gpu/collectives.py", "gpu/collectives_worker.py", "gpu/collective_judge.py",
    "gpu/contention.py", "gpu/link_matrix.py", "gpu/link_matrix_judge.py", "doctor/link_matrix.py",
    "doctor/gpu_probes.py",
])
def test_a_job_with_one_home_left_no_second(old: str) -> None:
    assert not (PACKAGE / old).exists(), f"opgate/{old} is back beside its one home (see opgate/gpu/__init__.py)"


def test_atomic_writes_go_through_the_engine_atomic_write() -> None:
    """os.replace (the rename of a temp file) appears only in engine/atomic.py."""
    allowed = {PACKAGE / "engine" / "atomic.py"}
    wrong = []
    for path in modules_in(PACKAGE):
        if path in allowed:
            continue
        for node in ast.walk(parsed(path)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "replace"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "os"):
                wrong.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not wrong, f"atomic writes outside opgate.engine.atomic.write_atomically: {wrong}"
