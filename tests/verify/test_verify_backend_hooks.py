"""The Backend hooks the numerics check asks through the backend registry instead of importing a backend:
`interpreter_limitations` (none by default; Triton's interpreter in bfloat16: what opgate's fixes left wrong)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from opgate.verify.backends import backend
from opgate.verify.backends.base import Backend, ImplementationChoice, PreparedImplementation

CHECK_SOURCE = Path(__file__).resolve().parents[2] / "src" / "opgate" / "verify" / "check.py"


def _prepared(backend_name: str, **facts: object) -> PreparedImplementation:
    choice = ImplementationChoice("impl", backend_name, "user")
    return PreparedImplementation(choice, "cpu", run=lambda *_: None, facts=dict(facts))  # type: ignore[arg-type]


def test_a_backend_has_no_interpreter_limitations_by_default() -> None:
    class Plain(Backend):
        name = "plain"

    assert Plain().interpreter_limitations(_prepared("plain", interpreter=True), "bfloat16") == []
    assert backend("torch").interpreter_limitations(_prepared("torch"), "bfloat16") == []


def test_triton_reports_its_interpreter_bfloat16_limitations_only_there(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton")
    from opgate.verify.backends import triton_backend

    left = ["tl.fma: the interpreter computes it wrongly on bfloat16 and opgate's float32 emulation failed its probe"]
    monkeypatch.setattr(triton_backend, "interpreter_bf16_limitations", lambda: list(left))
    triton = backend("triton")
    assert isinstance(triton, triton_backend.TritonBackend)
    assert triton.interpreter_limitations(_prepared("triton", interpreter=True), "bfloat16") == left
    assert triton.interpreter_limitations(_prepared("triton", interpreter=True), "float16") == []
    assert triton.interpreter_limitations(_prepared("triton", interpreter=False), "bfloat16") == []  # compiled


def test_the_numerics_check_imports_no_backend_module() -> None:
    """verify/check.py asks backends through the registry (opgate.verify.backends.backend), never a module of one."""
    tree = ast.parse(CHECK_SOURCE.read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {f"{node.module}.{a.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 and node.module for a in node.names}
    imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    shipped = ("torch_eager", "torch_compile", "triton_backend", "triton_interpreter_bf16", "onnxruntime_backend",
               "tvm_backend")
    assert not [name for name in imported if name.rsplit(".", 1)[-1] in shipped]


def test_outputs_are_kept_where_computed_and_a_reused_buffer_is_copied_before_the_second_call() -> None:
    """function_runner hands back the outputs where the implementation computed them (judge_case compares them there).
    A NaN in an output makes it call once more to tell computed NaN from never-written memory; an implementation that
    returns the same buffer every call must not see its first outputs overwritten by that second call."""
    import math

    import torch

    from opgate.verify.backends.base import function_runner

    buffer = torch.zeros(3)
    calls = []

    def reuses_its_buffer(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        buffer[0], buffer[1], buffer[2] = math.nan, float(len(calls)), float(x.sum())
        return buffer

    output = function_runner(reuses_its_buffer, "cpu", False)([torch.ones(2)], ["contiguous"], [((3,), "float32")])
    assert len(calls) == 2  # the NaN asked for the second call
    assert output.outputs[0][1].item() == 1.0 and output.outputs[0] is not buffer
    assert output.unwritten == [0]  # the second call computed NaN there too: not unwritten memory
