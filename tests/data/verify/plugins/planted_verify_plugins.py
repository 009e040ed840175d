"""A third-party package's verify plugins (registered by a dist-info in the tests): a backend that runs
implementations written against NumPy, a stage that checks every implementation's output has the reference's
shape in a child process, and a stage that needs a tool nobody has."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# A third party imports opgate.api only (tests/test_api.py holds it to that)
from opgate.api import (Backend, Check, CheckContext, CheckResult, GpuStagePayload, ImplementationChoice,
                        OperatorPlan, PreparedImplementation, Stage, StageNeeds, function_runner,
                        implementation_function)


class NumpyBackend(Backend):
    name = "planted_numpy"

    def prepare(self, choice: ImplementationChoice, op: Any, dtype: str, workdir: Path) -> PreparedImplementation:
        import torch

        fn = implementation_function(op, choice)

        def through_numpy(*args: Any) -> Any:
            arrays = [a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else a for a in args]
            return torch.from_numpy(fn(*arrays))

        return PreparedImplementation(choice=choice, device="cpu (numpy)",
                                      run=function_runner(through_numpy, "cpu", False), facts={"numpy": True})


class ShapeStage(Stage):
    name = "planted_shape"
    summary = "the output has the reference's shape (a planted plugin stage)"
    order = 60

    def tasks(self, plan: OperatorPlan) -> list[Any]:
        return [plan.task(self, f"verify.{plan.op.name}.{choice.name}.planted_shape",
                          f"{plan.op.name}: {choice.name} output shape", "planted_verify_plugins:ShapeCheck", 60.0,
                          GpuStagePayload(spec_file=str(plan.spec_file), op=plan.op.name, impl=choice.name,
                                          dtype=plan.dtypes[0], seed=plan.seed), choice)
                for choice in plan.choices]


class ShapeCheck(Check):
    check_id = "verify.planted_shape"
    title = "output shape"
    verbs = ("verify",)

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        import torch

        from opgate.api import loaded_operators

        task = GpuStagePayload.from_dict(ctx.options)
        op = next(o for o in loaded_operators(task.spec_file) if o.name == task.op)
        x = torch.randn(4, 8, dtype=getattr(torch, task.dtype))
        want = tuple(op.reference(x).shape)
        impl = op.implementations[task.impl]
        got = impl.fn(x.numpy()) if impl.backend == "planted_numpy" else impl.fn(x)
        if tuple(got.shape) != want:
            return self.failed(f"output shape {tuple(got.shape)} != {want}")
        return self.passed(f"output shape {want} as the reference's")


class NeedsMissingToolStage(Stage):
    name = "planted_needs_tool"
    summary = "a planted stage that needs an executable nobody has"
    needs = StageNeeds(tools=("opgate-no-such-tool",))

    def tasks(self, plan: OperatorPlan) -> list[Any]:
        raise AssertionError("the engine must not ask a stage whose needs are unmet for tasks")
