"""A deliberately simple oracle for the example and corpus specs: inputs by `kind`, float64 truth, one error figure.

This is not opgate's comparator (that calibrates tolerances per op and dtype); it is what the examples' own tests
and scripts/check_examples.py use to show each implementation computes the operator at all, on small inputs, under
Triton's interpreter or on a GPU.

Set TRITON_INTERPRET=1 in the environment before loading a spec file when no GPU is present: Triton decides at
@triton.jit decoration time whether a kernel is interpreted.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from opgate.core.spec import Operator, Scalar, TensorSpec

TORCH_DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int8": torch.int8,
    "int32": torch.int32,
    "int64": torch.int64,
}
HALF_TYPES = (torch.float16, torch.bfloat16)

# Loose bounds on max|out - truth| / max|truth|: enough to tell a working kernel from a broken one, no more.
LOOSE_REL_TOL = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}


@dataclass(frozen=True)
class Case:
    """One input case: dims, dtype under test, seed and value regime."""

    dims: dict[str, int]
    dtype: str = "float32"
    seed: int = 0
    scale: float = 1.0  # multiplies every float input drawn with kind normal/logits (large-magnitude regime)
    nan: bool = False  # put a NaN into the first float tensor input
    noncontiguous: tuple[str, ...] = field(default=())  # inputs handed over as strided views


def case_from(meta: dict[str, Any], default_dims: dict[str, int]) -> Case:
    """A Case from a corpus `EXPOSED_BY` entry (unspecified dims take the operator's first declared size)."""
    return Case(
        dims={**default_dims, **meta.get("dims", {})},
        dtype=meta.get("dtype", "float32"),
        seed=meta.get("seed", 0),
        scale=meta.get("scale", 1.0),
        nan=meta.get("nan", False),
        noncontiguous=tuple(meta.get("noncontiguous", ())),
    )


def _draw(spec: TensorSpec, shape: tuple[int, ...], gen: torch.Generator, case: Case) -> torch.Tensor:
    kind = spec.kind
    if kind in ("normal", "logits"):
        return torch.randn(shape, generator=gen, dtype=torch.float64) * case.scale
    if kind == "uniform":
        low = -1.0 if spec.low is None else spec.low
        high = 1.0 if spec.high is None else spec.high
        return low + (high - low) * torch.rand(shape, generator=gen, dtype=torch.float64)
    if kind == "positive":
        return 0.05 + torch.rand(shape, generator=gen, dtype=torch.float64)
    if kind in ("integer", "index"):
        low = 0 if spec.low is None else int(spec.low)
        high = 10 if spec.high is None else int(spec.high)
        return torch.randint(low, high + 1, shape, generator=gen, dtype=torch.int64).to(torch.float64)
    if kind == "probability":
        return torch.softmax(torch.randn(shape, generator=gen, dtype=torch.float64), dim=-1)
    if kind == "constant":
        return torch.full(shape, 0.5, dtype=torch.float64)
    raise ValueError(f"harness: unknown kind {kind!r}")


def _strided(t: torch.Tensor) -> torch.Tensor:
    """The same values as a non-contiguous view: column-major for 2+ dims, every other element for 1-D."""
    if t.dim() >= 2:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    wide = torch.empty(t.shape[0] * 2, dtype=t.dtype, device=t.device)
    wide[::2] = t
    return wide[::2]


def make_inputs(op: Operator, case: Case, device: str = "cpu") -> list[Any]:
    """Positional arguments in the spec's input order: tensors in the case's dtype, scalars as given."""
    gen = torch.Generator().manual_seed(case.seed)
    args: list[Any] = []
    nan_done = False
    for inp in op.inputs:
        if isinstance(inp, Scalar):
            args.append(inp.value)
            continue
        shape = inp.concrete_shape(case.dims)
        values = _draw(inp, shape, gen, case)
        dtype = TORCH_DTYPES[inp.dtype or case.dtype]
        if case.nan and not nan_done and dtype.is_floating_point and values.numel() > 0:
            flat = values.view(-1)
            flat[flat.numel() // 2] = math.nan
            nan_done = True
        t = values.to(dtype).to(device)
        if inp.name in case.noncontiguous:
            t = _strided(t)
        args.append(t)
    return args


def upcast(args: list[Any]) -> list[Any]:
    return [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


def truth(op: Operator, args: list[Any]) -> torch.Tensor:
    """The reference in float64 on CPU."""
    return op.reference(*upcast([a.cpu() if isinstance(a, torch.Tensor) else a for a in args]))


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max|out - ref| / max|ref| over finite truth; inf when shapes differ or non-finite values disagree."""
    out = out.detach().cpu()
    if out.shape != ref.shape:
        return math.inf
    if not ref.is_floating_point():  # integer outputs (quantized): largest integer difference
        return float((out.to(torch.int64) - ref.to(torch.int64)).abs().max()) if ref.numel() else 0.0
    o = out.double()
    finite = torch.isfinite(ref)
    # Where the truth is NaN/inf the output must be too (same inf sign); finite truth needs finite output.
    if not torch.equal(torch.isnan(o), torch.isnan(ref)):
        return math.inf
    if not torch.equal(o[~finite & ~torch.isnan(ref)], ref[~finite & ~torch.isnan(ref)]):
        return math.inf
    if not torch.isfinite(o[finite]).all():
        return math.inf
    if not finite.any():
        return 0.0
    scale = ref[finite].abs().max().clamp_min(1e-30)
    return float((o[finite] - ref[finite]).abs().max() / scale)


def run_impl(op: Operator, impl_name: str, args: list[Any]) -> torch.Tensor:
    """Run one implementation; numpy RuntimeWarnings from the interpreter (inf/NaN arithmetic) are not failures."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return op.implementations[impl_name].fn(*args)


def baseline(op: Operator, args: list[Any]) -> torch.Tensor:
    """The reference evaluated in the dtype under test (what eager PyTorch gives)."""
    return op.reference(*[a.cpu() if isinstance(a, torch.Tensor) else a for a in args])


def _f32_to_bf16_bits_rne(data: Any) -> Any:
    """float32 array -> bfloat16 bit patterns (uint16), round to nearest even, NaN kept NaN."""
    import numpy as np

    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(data)
    rounded[nan] = ((bits[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded


def patch_interpreter_bf16_rounding() -> Any:
    """Make Triton's interpreter round float32 -> bfloat16 to nearest even, as the GPU's cvt.rn.bf16.f32 does.

    Triton 3.9's interpreter truncates that cast (and its "rtne" path rounds half up without carrying into the
    exponent), so a correct kernel's bfloat16 output carries up to 2x the rounding error it has on a GPU. Returns an
    undo callable. Only the float32 -> bfloat16 direction changes.
    """
    import triton.language as tl
    from triton.runtime import interpreter

    builder_cls = interpreter.InterpreterBuilder
    original = builder_cls.cast_impl

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return interpreter.TensorHandle(_f32_to_bf16_bits_rne(src.data), dst_type.scalar)
        return original(self, src, dst_type)

    builder_cls.cast_impl = cast_impl

    def undo() -> None:
        builder_cls.cast_impl = original

    return undo


# Floors under which an error counts as rounding noise, whatever eager PyTorch's own error was.
NOISE_FLOOR = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-2}
# An implementation "agrees" with the operator when its error is at most this multiple of eager PyTorch's.
AGREE_MULTIPLE = 4.0


def agrees(err: float, eager_err: float, dtype: str) -> bool:
    """Is `err` (vs the float64 truth) within a small multiple of eager PyTorch's own error, or under a noise floor?"""
    return err <= max(AGREE_MULTIPLE * eager_err, NOISE_FLOOR[dtype])
