"""A verify stage is declared once (issue #29): each stage declares its tasks' timeout and exclusivity
(opgate.engine.stages.Stage), its tasks carry exactly that, and no check class a stage runs repeats them or names
itself (the runner gives a result its task's id and title; a check reads its limit from CheckContext.timeout_s)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from opgate.engine.stages import Stage, discover_stages
from tests_verify_support import ROOT

VERIFY = ROOT / "src" / "opgate" / "verify"
SOFTMAX = ROOT / "examples" / "ops" / "softmax.py"
# What each shipped stage declares: (timeout_s, exclusive); numerics' None is the run's --timeout.
DECLARED = {"numerics": (None, False), "runtime": (300.0, True), "recovery": (300.0, True),
            "sanitizer": ("SANITIZER_TIMEOUT_S + 60", False), "ncu": (360.0, True), "qos": (240.0, True)}
STAGE_ONLY = {"timeout_s", "exclusive"}
TASK_NAMES = {"check_id", "title"}


def _declared_names(node: ast.ClassDef) -> set[str]:
    """Names a class body binds itself: assignments, annotated assignments, methods and properties."""
    names: set[str] = set()
    for item in node.body:
        if isinstance(item, ast.Assign):
            names |= {t.id for t in item.targets if isinstance(t, ast.Name)}
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
        elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(item.name)
    return names


def _verify_classes() -> list[tuple[Path, ast.ClassDef]]:
    return [(path, node) for path in sorted(VERIFY.rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)]


def _check_classes(classes: list[tuple[Path, ast.ClassDef]]) -> set[str]:
    """The Check subclasses defined in verify/ (followed through their bases there, by name)."""
    checks = {"Check"}
    while True:
        more = {node.name for _, node in classes
                if any(isinstance(b, ast.Name) and b.id in checks for b in node.bases)} - checks
        if not more:
            return checks - {"Check"}
        checks |= more


def test_no_verify_check_class_declares_a_timeout_exclusivity_or_its_name() -> None:
    classes = _verify_classes()
    checks = _check_classes(classes)
    assert {"VerifyImplementationCheck", "VerifyRuntimeCheck", "VerifySanitizerCheck", "VerifyNcuCheck",
            "VerifyOomRecoveryCheck", "VerifyQosCheck", "VerifyRuntimeWarmUpCheck", "GpuStageCheck"} <= checks
    offenders = [f"{path.relative_to(ROOT)}: {node.name}.{name}" for path, node in classes if node.name in checks
                 for name in sorted(_declared_names(node) & (STAGE_ONLY | TASK_NAMES))]
    assert offenders == []


def test_each_shipped_stage_declares_its_timeout_and_exclusivity() -> None:
    from opgate.verify.runtime import SANITIZER_TIMEOUT_S

    stages = {name: stage for name, stage in discover_stages().items() if name in DECLARED}
    assert set(stages) == set(DECLARED)
    for name, stage in stages.items():
        timeout, exclusive = DECLARED[name]
        if timeout == "SANITIZER_TIMEOUT_S + 60":
            timeout = SANITIZER_TIMEOUT_S + 60
        assert (stage.timeout_s, stage.exclusive) == (timeout, exclusive), name
    assert (Stage.timeout_s, Stage.exclusive) == (None, False)  # a plugin stage that declares nothing


def test_the_gpu_stages_tasks_carry_what_their_stage_declares(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             ) -> None:
    from opgate.core.spec import load_spec_file
    from opgate.verify import builtin_stages
    from opgate.verify.engine import VerifyRequest, gpu_stage_tasks, select

    for stage in (builtin_stages.SanitizerStage, builtin_stages.NcuStage):
        monkeypatch.setattr(stage, "find_tool", lambda self, tool: "/bin/true")
    names = ["runtime", "recovery", "sanitizer", "ncu", "qos"]
    request = VerifyRequest(spec_file=SOFTMAX, impls=["triton"], stages=["numerics", *names], budget="quick")
    [sel] = select(load_spec_file(SOFTMAX), request, None)
    tasks, skipped = gpu_stage_tasks(sel, request, tmp_path)
    assert skipped == []
    stages = discover_stages()
    seen = set()
    for task in tasks:
        stage = stages[task.stage]
        seen.add(task.stage)
        assert task.timeout_s == stage.timeout_s, task.check_id
        warm_up = task.check_id.endswith("_warm_up")  # the runtime check's compile, side by side by design
        assert task.exclusive == (stage.exclusive and not warm_up), task.check_id
    assert seen == set(names)


def test_a_plugin_stages_declaration_reaches_its_tasks_and_none_is_the_runs_timeout(tmp_path: Path) -> None:
    from opgate.core.spec import load_spec_file
    from opgate.engine.stages import OperatorPlan
    from opgate.verify.backends.base import ImplementationChoice
    from opgate.verify.tasks import GpuStagePayload

    class Declared(Stage):
        name = "declared"
        timeout_s = 120.0
        exclusive = True

    class Undeclared(Stage):
        name = "undeclared"

    [op] = load_spec_file(SOFTMAX)
    choice = ImplementationChoice("triton", "triton", "user")
    plan = OperatorPlan(op, [choice], ["float32"], SOFTMAX, "quick", 0, False, 1, tmp_path, tmp_path, 900.0)
    payload = GpuStagePayload(spec_file=str(SOFTMAX), op=op.name, impl="triton", dtype="float32")
    declared = plan.task(Declared(), "verify.softmax.triton.declared", "t", "m:C", Declared.timeout_s, payload, choice)
    assert (declared.timeout_s, declared.exclusive) == (120.0, True)
    undeclared = plan.task(Undeclared(), "verify.softmax.triton.undeclared", "t", "m:C", None, payload, choice)
    assert (undeclared.timeout_s, undeclared.exclusive) == (900.0, False)
    assert plan.task(Declared(), "i", "t", "m:C", 5.0, payload, choice, exclusive=False).exclusive is False


def test_the_ncu_check_gives_ncu_its_tasks_timeout_less_the_teardown() -> None:
    from opgate.checks.base import CheckContext
    from opgate.verify.builtin_stages import NcuStage
    from opgate.verify.runtime import NCU_TEARDOWN_S, ncu_seconds

    assert ncu_seconds(CheckContext(verb="verify", timeout_s=500.0)) == 500.0 - NCU_TEARDOWN_S
    assert ncu_seconds(CheckContext(verb="verify")) == NcuStage.timeout_s - NCU_TEARDOWN_S == 330.0  # run directly
