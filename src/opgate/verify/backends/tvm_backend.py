"""`tvm`: the reference (or a user torch function) imported through TVM's Relax frontend from a
torch.export program, built for LLVM (CPU; the apache-tvm wheel is CPU-only) and run on its VM.

Without apache-tvm installed the result is `skipped` with that reason; opgate does not install it.
NOTE: this path is written against TVM's Relax API (`from_exported_program`, `tvm.compile` or
`relax.build`, `relax.VirtualMachine`) and has not been run in opgate's CI, which has no TVM.
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
    make_array = getattr(tvm, "nd", None)

    def to_tvm(tensor: Any) -> Any:
        array = tensor.detach().cpu().contiguous().numpy()
        return make_array.array(array, device) if make_array is not None else tvm.runtime.tensor(array, device)

    def run(values: Sequence[Any], layouts: Sequence[str], out_specs: OutSpecs) -> RunOutput:
        args = [to_tvm(v) for v, spec in zip(values, op.inputs) if not isinstance(spec, Scalar)]
        result = vm["main"](*args)
        items = list(result) if isinstance(result, (list, tuple)) or hasattr(result, "__len__") else [result]
        outputs = [torch.from_numpy(item.numpy().copy()) for item in items]
        return RunOutput(outputs, [0] * len(outputs))

    return PreparedImplementation(
        choice=choice, device="llvm (cpu)", run=run,
        facts={"tvm": getattr(tvm, "__version__", "unknown"), "target": "llvm"},
        figures=[Figure("TVM target", "llvm")],
    )
