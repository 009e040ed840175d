"""Gradients: an operator with `requires_grad` inputs gets a derived operator `<name>.grad`.

The derived operator's "output" is the tuple of gradients with respect to the requires_grad inputs (in
declaration order), given one random upstream gradient per differentiable output. It is an ordinary
`Operator`, so the whole machinery applies unchanged: case plan, calibrated budgets, judging, shrinking,
replay tokens.

- reference: autograd of the spec's reference. On float64 inputs that is the truth; on the dtype's inputs
  the eager baseline the budgets are calibrated from.
- each implementation: autograd through the implementation (its `torch.autograd.Function` backward, or
  plain autograd when it is composed of differentiable torch ops). An implementation whose outputs do
  not require grad (no backward: a kernel that computes the gradient in its forward pass, a bare Triton
  launch) fails, and so does a `None` gradient for an input that requires grad.
- opgate's extras (the reference through torch.compile) are the reference's grad function run through
  the same backend: torch.compile traces the forward and autograd runs its compiled backward.

Upstream gradients are deterministic: drawn in float64 from a generator seeded by the operator's name,
the input shapes and the output's index and shape, then rounded to bfloat16 values (|g| < 2^-14 flushed to
0). Every float dtype a gradient is checked in (float64, float32, float16, bfloat16) holds those values
exactly, so the truth, the baseline and the candidate all see the same upstream values. The seed does not
depend on input values, so the calibration's perturbed inputs see the same upstream gradient too.

The functions run under `torch.enable_grad()`: the runner and the calibration call everything under
`no_grad`. Inputs are detached (strides kept, so layout cases stay strided) and set to require grad.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from opgate.core.spec import FLOAT_DTYPES, Implementation, Operator, SpecError, TensorSpec

GRAD_SUFFIX = ".grad"
# float8 dtypes are left out: PyTorch has no autograd for most ops in them, and the upstream values'
# grid (bfloat16) is not exact there.
GRADIENT_DTYPES = ("float64", "float32", "float16", "bfloat16")
FAILURE_CLASS = "gradient"
# Backends whose implementations are Python functions autograd can run through.
AUTOGRAD_BACKENDS = ("torch", "torch.compile", "triton")
NO_BACKWARD = "output has no grad_fn: the implementation has no backward"
# Upstream values below this magnitude are flushed to 0: float16's smallest normal, so a bfloat16 value is
# never a float16 subnormal.
UPSTREAM_FLUSH = 2.0**-14


class GradientError(Exception):
    """An implementation delivered no gradient (no backward, or None for an input that requires grad)."""


@dataclass
class GradientOperator(Operator):
    """`<forward>.grad`: the gradients of `forward`'s outputs w.r.t. its requires_grad inputs."""

    forward: Operator | None = None
    # opgate's extras for the twin: torch.compile traces through autograd; ONNX and TVM export no backward
    extra_backends: tuple[str, ...] = ("torch.compile",)


def is_gradient_operator(op: Any) -> bool:
    return isinstance(op, GradientOperator)


def gradient_failure_class(op: Any) -> str:
    """The failure class of a failing result of `op`: "gradient" for a derived operator, else ""."""
    return FAILURE_CLASS if is_gradient_operator(op) else ""


def with_gradient_operators(ops: Sequence[Operator]) -> list[Operator]:
    """`ops` followed by the `<name>.grad` twin of each one with requires_grad inputs (once: idempotent)."""
    names = {op.name for op in ops}
    derived = []
    for op in ops:
        twin = gradient_operator(op)
        if twin is not None and twin.name not in names:
            derived.append(twin)
            names.add(twin.name)
    return list(ops) + derived


def gradient_operator(op: Operator) -> GradientOperator | None:
    """The derived gradient operator of `op`, or None when no input requires grad (or op is derived)."""
    if is_gradient_operator(op):
        return None
    grad_inputs = op.gradient_inputs
    if not grad_inputs:
        return None
    for inp in grad_inputs:
        if (inp.dtype is not None and inp.dtype not in FLOAT_DTYPES) or inp.kind in ("index", "integer"):
            raise SpecError(f"operator {op.name!r}: input {inp.name!r} has requires_grad=True but is "
                            f"{inp.dtype or inp.kind}; only float inputs have gradients, drop requires_grad")
    dtypes = [d for d in op.dtypes if d in GRADIENT_DTYPES]
    if not dtypes:
        raise SpecError(f"operator {op.name!r}: requires_grad inputs need a dtype opgate checks gradients in "
                        f"({', '.join(GRADIENT_DTYPES)}); dtypes are {', '.join(op.dtypes)}")
    positions = [i for i, inp in enumerate(op.inputs) if isinstance(inp, TensorSpec) and inp.requires_grad]
    twin = GradientOperator(
        name=op.name + GRAD_SUFFIX,
        reference=gradient_function(op.reference, op, positions, strict=False),
        inputs=list(op.inputs),
        dims={k: list(v) for k, v in op.dims.items()},
        dtypes=dtypes,
        propagates_nonfinite=op.propagates_nonfinite,
        # A forward tolerance= override says nothing about the backward: its budgets are calibrated.
        exact_dims=list(op.exact_dims),
        perf_dims=dict(op.perf_dims or {}),
        derived_dims=dict(op.derived_dims),
        nan_policy=op.nan_policy,
        subnormals=op.subnormals,
        spec_file=op.spec_file,
        forward=op,
    )
    for impl in op.implementations.values():
        if impl.backend not in AUTOGRAD_BACKENDS:
            continue  # an exported user function (ONNX Runtime, TVM) has no autograd to run through
        twin.implementations[impl.name] = Implementation(
            impl.name, impl.backend, gradient_function(impl.fn, op, positions, strict=True))
    return twin


def upstream_gradient(op_name: str, input_shapes: Sequence[tuple[int, ...]], index: int, output: Any) -> Any:
    """The upstream gradient of output `index` (see the module docstring), in the output's dtype and device."""
    import torch

    if output.device.type == "meta":  # shapes only (counting a twin's work, core/work.py): nothing to draw
        return torch.empty(output.shape, dtype=output.dtype, device="meta")
    text = repr((op_name, [tuple(s) for s in input_shapes], index, tuple(output.shape)))
    if _KEPT_ON_DEVICE is not None:
        key = (text, output.dtype, str(output.device))
        kept = _KEPT_ON_DEVICE.get(key)
        if kept is None:
            kept = _KEPT_ON_DEVICE[key] = _drawn_on_device(text, tuple(output.shape), output.dtype, output.device)
        return kept
    values = _drawn_upstream(text, tuple(output.shape))
    moved = values.to(dtype=output.dtype, device=output.device)
    return moved.clone() if moved is values else moved  # the caller may write into it; the drawn one is kept


# The last few upstream gradients drawn, by what seeds them: a case's calibration calls a gradient twin's reference
# about eight times on the same shapes (truth, baseline, the perturbed and log-space evaluations of its bound terms),
# and drawing the same float64 normal values each time was a quarter of gems_softmax.grad's calibration on the H200
# host (torch.randn, 10.8 s of 43.8 s; benchmarks/profile_calibration.py). The values are the same either way.
_DRAWN: "collections.OrderedDict[str, Any]" = collections.OrderedDict()
DRAWN_KEPT = 4


def _seed_of(text: str) -> int:
    """The generator seed of an upstream gradient: from what identifies it, never from input values."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") % (2**63 - 1)


def _drawn_upstream(text: str, shape: tuple[int, ...]) -> Any:
    """The float64 CPU upstream gradient seeded by `text` (bfloat16-exact values, tiny ones flushed to zero)."""
    import torch

    values = _DRAWN.get(text)
    if values is not None:
        _DRAWN.move_to_end(text)
        return values
    gen = torch.Generator().manual_seed(_seed_of(text))
    values = torch.randn(shape, generator=gen, dtype=torch.float64)
    values = values.to(torch.bfloat16).to(torch.float64)
    values = torch.where(values.abs() < UPSTREAM_FLUSH, torch.zeros_like(values), values)
    _DRAWN[text] = values
    while len(_DRAWN) > DRAWN_KEPT:
        _DRAWN.popitem(last=False)
    return values


# While a gradient twin is timed (upstream_kept_on_device): its upstream gradients, drawn once on the output's device.
_KEPT_ON_DEVICE: dict[tuple[str, Any, str], Any] | None = None


@contextlib.contextmanager
def upstream_kept_on_device() -> Any:
    """Within: each upstream gradient is drawn once on the output's own device and that same tensor is handed to
    every later call, neither copied nor cloned. For timing and graph capture only (verify/runtime.py): a gradient
    twin's call there otherwise drew its upstream gradient on the host and copied it to the GPU inside the timed
    region, and that copy was what got timed (fla_swish.grad at 16384 x 11008 on the H200: 651 ms a call against a
    300 us roofline floor) and what made every twin "not capturable" (a host-to-device copy inside capture). The
    values are drawn from the same seed by the device's generator: not the host's values, which no timing needs;
    the numerics checks never run under this."""
    global _KEPT_ON_DEVICE
    previous = _KEPT_ON_DEVICE
    _KEPT_ON_DEVICE = {}
    try:
        yield
    finally:
        _KEPT_ON_DEVICE = previous


def _drawn_on_device(text: str, shape: tuple[int, ...], dtype: Any, device: Any) -> Any:
    """An upstream gradient drawn on `device` (bfloat16-exact values, tiny ones flushed to zero, as on the host)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(_seed_of(text))
    values = torch.randn(shape, generator=gen, dtype=torch.float32, device=device).to(torch.bfloat16)
    values = values.masked_fill(values.abs() < UPSTREAM_FLUSH, 0.0)
    return values.to(dtype)


def gradient_function(fn: Callable[..., Any], op: Operator, positions: Sequence[int],
                      strict: bool) -> Callable[..., tuple[Any, ...]]:
    """fn's gradients w.r.t. the arguments at `positions`, for the deterministic upstream gradients.

    strict (implementations): no differentiable output, or a None gradient, raises GradientError.
    Otherwise (the reference): a None gradient (an input the output does not depend on) is zero.
    """
    names = [op.inputs[p].name for p in positions]

    def grads(*args: Any) -> tuple[Any, ...]:
        import torch

        from opgate.verify.calibrate import as_outputs

        # The reference called on inputs that already require grad (error_bounds differentiates the truth to
        # bound its accumulation error): keep the graph, so the gradients are differentiable in turn.
        outer = not strict and any(isinstance(args[p], torch.Tensor) and args[p].requires_grad for p in positions)
        with torch.enable_grad():
            call_args = list(args)
            leaves = []
            for p in positions:
                leaf = args[p] if outer else args[p].detach().requires_grad_(True)  # detach keeps a layout's strides
                call_args[p] = leaf
                leaves.append(leaf)
            outputs = as_outputs(fn(*call_args))
            shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
            differentiable = [(k, o) for k, o in enumerate(outputs)
                              if isinstance(o, torch.Tensor) and o.is_floating_point() and o.requires_grad]
            if not differentiable:
                if strict:
                    raise GradientError(NO_BACKWARD + " (its outputs do not require grad: wrap the kernels in a "
                                        "torch.autograd.Function with a backward)")
                return tuple(torch.zeros_like(leaf) for leaf in leaves)
            upstream = [upstream_gradient(op.name, shapes, k, o) for k, o in differentiable]
            found = torch.autograd.grad([o for _, o in differentiable], leaves, grad_outputs=upstream,
                                        allow_unused=True, create_graph=outer)
        result = []
        for name, leaf, grad in zip(names, leaves, found):
            if grad is None:
                if strict:
                    raise GradientError(f"the gradient w.r.t. input {name!r} is None: its backward returns no "
                                        "gradient for an input that requires grad")
                grad = torch.zeros_like(leaf)
            result.append(grad if outer else grad.detach())
        return tuple(result)

    grads.__name__ = f"{getattr(fn, '__name__', 'fn')}_grad"
    grads.__qualname__ = grads.__name__
    grads.__wrapped_forward__ = fn  # type: ignore[attr-defined]
    return grads


def gradient_remediation(reasons: str) -> str:
    """What to fix in a backward, from the failing cases' reasons."""
    if NO_BACKWARD in reasons:
        return ("give the implementation a backward: wrap its kernels in a torch.autograd.Function whose backward "
                "returns the gradients (or compose it from differentiable torch ops); a forward that writes the "
                "gradient into a buffer of its own is invisible to autograd")
    if "is None" in reasons:
        return "return a gradient from backward for every input that requires grad (None only for the others)"
    return ("the backward's gradients differ from autograd of the float64 reference under random upstream "
            "gradients: check the formula (e.g. softmax minus one-hot at the label, the 1/std in a norm's weight "
            "gradient), the scaling by the upstream gradient, and reductions over the batch")
