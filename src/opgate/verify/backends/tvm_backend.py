"""`tvm`: the reference (or a user torch function) imported through TVM's Relax frontend from a
torch.export program, built for LLVM (CPU; the apache-tvm wheel is CPU-only) and run on its VM.

Without apache-tvm installed the result is `skipped` with that reason (the `tvm` extra installs it).
Tensors cross between torch and TVM through DLPack in both directions, so every dtype both sides know
(bfloat16 included, which NumPy cannot hold) passes bit for bit; outputs are copied out of the VM's
buffers before the next call. Every named dim is exported dynamic, so one build serves every case; where
TVM's frontend rejects the symbolic shape arithmetic, dims are fixed (one build per size). Run against
apache-tvm 0.27 (`tvm.compile`, `relax.VirtualMachine`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Sequence

from opgate.model.errors import SkipCheck
from opgate.model.results import Figure
from opgate.verify.backends.base import (
    Backend,
    ImplementationChoice, OutSpecs, PreparedImplementation, RunOutput, implementation_function,
)
from opgate.core.spec import Operator, Scalar

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

    target = tvm.target.Target("llvm")
    device = tvm.cpu()
    tensor_specs = op.tensor_inputs

    def dynamic_shapes(static_dims: frozenset[str]) -> Any:
        """torch.export's dynamic_shapes for the Wrapped module: every named dim dynamic but `static_dims`."""
        return (tuple({axis: torch.export.Dim.DYNAMIC for axis, d in enumerate(spec.shape)
                       if isinstance(d, str) and d not in static_dims} or None for spec in tensor_specs),)

    def build(example: Sequence[Any], static_dims: frozenset[str] | None) -> Any:
        """Export (dims in static_dims fixed; None: every dim fixed), import through Relax, compile for LLVM."""
        shapes = None if static_dims is None else dynamic_shapes(static_dims)
        program = torch.export.export(Wrapped().eval(), tuple(example), dynamic_shapes=shapes)
        module = from_exported_program(program, keep_params_as_input=False)
        executable = tvm.compile(module, target) if hasattr(tvm, "compile") else relax.build(module, target)
        return relax.VirtualMachine(executable, device)

    def key_of(values: Sequence[Any], static_dims: frozenset[str] | None) -> tuple[Any, ...]:
        """What a build is specialised to: the sizes of its fixed dims (every shape when all are fixed)."""
        if static_dims is None:
            return tuple(tuple(v.shape) for v in values)
        sizes = {d: v.shape[axis] for v, spec in zip(values, tensor_specs) for axis, d in enumerate(spec.shape)
                 if isinstance(d, str)}
        return tuple(sizes[d] for d in sorted(static_dims))

    facts: dict[str, Any] = {"tvm": getattr(tvm, "__version__", "unknown"), "target": "llvm",
                             "tensor_exchange": "DLPack", "shapes": "dynamic (one build for every case)"}
    # The frontend rejects some symbolic-shape arithmetic (e.g. sym_float/pow of a dim, as in attention's
    # 1/sqrt(D)): then fix one dim at a time (exact dims first), and at worst every dim, building once per
    # distinct size of what is fixed.
    named = [d for d in op.dims if d in op.exact_dims] + [d for d in reversed(list(op.dims)) if d not in op.exact_dims]
    attempts: list[frozenset[str] | None] = [frozenset()] + [frozenset([d]) for d in named] + [None]
    builds: dict[tuple[Any, ...], Any] = {}
    static_dims: frozenset[str] | None = frozenset()
    first_failure = ""
    for static_dims in attempts:
        try:
            builds[key_of(tensors, static_dims)] = build(tensors, static_dims)
            break
        except Exception as exc:
            first_failure = first_failure or f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            if static_dims is None:
                message = f"TVM could not import/build {choice.describe()} in {dtype}: {first_failure}"
                if choice.origin == "reference":
                    raise SkipCheck(message) from None
                raise
    if static_dims:
        facts["shapes"] = (f"dims {', '.join(sorted(static_dims))} fixed, one build per size (the fully dynamic "
                           f"program failed: {first_failure})")
    elif static_dims is None:
        facts["shapes"] = f"static: one build per case shape (every dynamic program failed: {first_failure})"

    def example_for(values: Sequence[Any]) -> list[Any]:
        """Tensors to export a new build with: the case's sizes for the fixed dims, the example case's (>= 2,
        distinct) for the dynamic ones, so torch.export does not specialise a dynamic dim of size 0 or 1."""
        if static_dims is None:
            return [v.detach().cpu().contiguous() for v in values]
        shaped = []
        for value, example, spec in zip(values, tensors, tensor_specs):
            shape = [value.shape[axis] if isinstance(d, str) and d in static_dims else example.shape[axis]
                     for axis, d in enumerate(spec.shape)]
            shaped.append(torch.zeros(shape, dtype=value.dtype))
        return shaped

    def vm_for(values: Sequence[Any]) -> Any:
        key = key_of(values, static_dims)
        if key not in builds:
            builds[key] = build(example_for(values), static_dims)
        return builds[key]

    def run(values: Sequence[Any], layouts: Sequence[str], out_specs: OutSpecs) -> RunOutput:
        tensor_values = [v for v, spec in zip(values, op.inputs) if not isinstance(spec, Scalar)]
        vm = vm_for(tensor_values)
        outputs = [from_tvm(item) for item in tvm_outputs(tvm, vm["main"](*[to_tvm(tvm, v) for v in tensor_values]))]
        return RunOutput(outputs, [0] * len(outputs))

    def finish() -> None:
        facts["builds"] = len(builds)

    return PreparedImplementation(
        choice=choice, device="llvm (cpu)", run=run, facts=facts,
        figures=[Figure("TVM target", "llvm", key="verify.numerics.tvm_target")],
        finish=finish,
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


class TvmBackend(Backend):
    name = "tvm"
    startup_s = 10.0
    extra = True
    extra_rank = 3

    def prepare(self, choice: ImplementationChoice, op: Any, dtype: str, workdir: Path) -> PreparedImplementation:
        return prepare(choice, op, dtype, workdir)

    def unavailable_reason(self) -> str | None:
        return unavailable_reason()
