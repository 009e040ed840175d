"""`tvm`: the reference (or a user torch function) imported through TVM's Relax frontend from a
torch.export program, built for LLVM (CPU; the apache-tvm wheel is CPU-only) and run on its VM.

Without apache-tvm installed the result is `skipped` with that reason (the `tvm` extra installs it).
Tensors cross between torch and TVM through DLPack in both directions, so every dtype both sides know
(bfloat16 included, which NumPy cannot hold) passes bit for bit; outputs are copied out of the VM's
buffers before the next call. Run against apache-tvm 0.27 (`tvm.compile`, `relax.VirtualMachine`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Sequence

from opgate.errors import SkipCheck
from opgate.results import Figure
from opgate.verify.backends.base import (
    ImplementationChoice, OutSpecs, PreparedImplementation, RunOutput, implementation_function,
)
from opgate.verify.spec import Operator, Scalar

NOT_INSTALLED = ("apache-tvm is not installed: the TVM implementation (the reference through the Relax "
                 "frontend) needs `pip install apache-tvm`")


def unavailable_reason() -> str | None:
    """Why TVM cannot run here (checked without importing it), or None."""
    if importlib.util.find_spec("tvm") is None:
        return NOT_INSTALLED
    return None


def prepare(choice: ImplementationChoice, op: Operator, dtype: str, workdir: Path) -> PreparedImplementation:
    reason = unavailable_reason()
    if reason:
        raise SkipCheck(reason)
    import torch
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from opgate.verify.backends.onnxruntime_backend import example_case
    from opgate.verify.inputs import make_inputs

    fn = implementation_function(op, choice)
    generated = make_inputs(op, example_case(op), dtype)
    tensors = [v for v, spec in zip(generated.values, op.inputs) if not isinstance(spec, Scalar)]

    class Wrapped(torch.nn.Module):
        def forward(self, *tensor_args: Any) -> Any:
            it = iter(tensor_args)
            return fn(*[inp.value if isinstance(inp, Scalar) else next(it) for inp in op.inputs])

    dynamic = tuple({axis: torch.export.Dim.DYNAMIC for axis, d in enumerate(spec.shape) if isinstance(d, str)}
                    or None for spec in op.tensor_inputs)
    try:
        program = torch.export.export(Wrapped().eval(), tuple(tensors), dynamic_shapes=(dynamic,))
        module = from_exported_program(program, keep_params_as_input=False)
        target = tvm.target.Target("llvm")
        executable = tvm.compile(module, target) if hasattr(tvm, "compile") else relax.build(module, target)
    except Exception as exc:
        message = f"TVM could not import/build {choice.describe()} in {dtype}: {type(exc).__name__}: {exc}"
        if choice.origin == "reference":
            raise SkipCheck(message.splitlines()[0]) from None
        raise
    device = tvm.cpu()
    vm = relax.VirtualMachine(executable, device)

    def run(values: Sequence[Any], layouts: Sequence[str], out_specs: OutSpecs) -> RunOutput:
        args = [to_tvm(tvm, v) for v, spec in zip(values, op.inputs) if not isinstance(spec, Scalar)]
        outputs = [from_tvm(item) for item in tvm_outputs(tvm, vm["main"](*args))]
        return RunOutput(outputs, [0] * len(outputs))

    return PreparedImplementation(
        choice=choice, device="llvm (cpu)", run=run,
        facts={"tvm": getattr(tvm, "__version__", "unknown"), "target": "llvm", "tensor_exchange": "DLPack"},
        figures=[Figure("TVM target", "llvm")],
    )


def to_tvm(tvm: Any, tensor: Any) -> Any:
    """A torch tensor as a TVM tensor on the CPU, through DLPack (dense: TVM's VM takes compact tensors)."""
    return tvm.runtime.from_dlpack(tensor.detach().cpu().contiguous())


def from_tvm(array: Any) -> Any:
    """A TVM output as a torch tensor that owns its memory (the VM may reuse its buffers)."""
    import torch

    return torch.from_dlpack(array).clone()


def tvm_outputs(tvm: Any, result: Any) -> list[Any]:
    """The VM's result as a list of tensors: one tensor, or a tuple/Array of them (the Relax frontend
    returns a tuple even for a single output)."""
    if isinstance(result, tvm.runtime.Tensor):
        return [result]
    return list(result)
