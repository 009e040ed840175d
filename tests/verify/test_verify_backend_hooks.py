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
