"""The operator spec: the user-facing contract of `opgate verify` and `opgate analyze`.

A spec file is plain Python that builds `opgate.Operator` objects and registers implementations:

    softmax = opgate.Operator(
        "softmax",
        reference=lambda x: torch.softmax(x, dim=-1),
        inputs=[opgate.TensorSpec("x", ("M", "N"), kind="normal")],
        dims={"M": [4, 64], "N": [128, 1024]},
        dtypes=["float32", "float16", "bfloat16"],
        flops=lambda M, N: 5 * M * N,
    )

    @softmax.implementation("triton")
    def softmax_triton(x): ...

Extend this API; never break it. Nothing here imports torch: a spec is data until a backend runs it.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from opgate.model.errors import InputError



def known_backends() -> tuple[str, ...]:
    """Backend names registered in the `opgate.verify.backends` entry-point group (shipped and plugins)."""
    from opgate.engine.plugins import VERIFY_BACKENDS_GROUP, entry_points

    return tuple(entry_points(VERIFY_BACKENDS_GROUP))
from opgate.core.dtypes import FLOAT_DTYPES, INT_DTYPES, KNOWN_DTYPES  # noqa: F401  (one dtype table)
VALUE_KINDS = ("normal", "uniform", "positive", "logits", "probability", "index", "integer", "constant")
NAN_POLICIES = ("propagate", "ignore")
SUBNORMAL_POLICIES = ("any", "exact")
# The largest |value| an input of each unbounded kind promises, unless TensorSpec(max_magnitude=) says otherwise.
# A failure that only appears above it is a range limit (warned, with the bisected magnitude), below it a failure:
# softmax without max-subtraction breaks at logits of ~89 (a bug); a float32 layer norm at ~1e19 (a limit).
# 1e4 covers activations with outlier features (LLM hidden states reach ~1e3-1e4) and every realistic logit.
DEFAULT_MAX_MAGNITUDE = {"normal": 1e4, "logits": 1e4, "positive": 1e4}


class SpecError(InputError, ValueError):
    """A spec file is malformed; the message names the operator and field.

    An InputError, so the CLI prints it as one line and exits 2.
    """


@dataclass(frozen=True)
class TensorSpec:
    """One tensor input.

    shape: dim names (looked up in the operator's `dims`) or ints.
    dtype: None follows the dtype under test; a fixed name (e.g. "int64") pins it.
    kind: value distribution; low/high bound `uniform`, `index` and `integer` kinds (`index` needs `high`,
        exclusive). low/high may also name a dim, e.g. `high="V"` for indices into a table of V rows.
        `constant` fills the tensor with `low` (1.0 when unset).
    contiguous: True means the implementation only promises contiguous inputs (no strided fuzzing).
    requires_grad: verify gradients with respect to this input (the implementation's autograd backward against
        the float64 reference's autograd, with random upstream gradients).
    max_magnitude: the largest |value| this input promises (default: DEFAULT_MAX_MAGNITUDE by kind); an
        implementation that breaks only above it has a range limit (warned), below it a range bug (failed).
    hits: for kind="index": the name of another input (e.g. logits of shape (M, V)) whose argmax along its last
        dim about half of these indices equal, at the same leading position (labels that meet confident logits).
        By default an index input whose `high` names the last dim of an earlier float input of its shape plus that
        dim (labels with high="V" beside logits (M, V)) hits that input's argmax; hits=False turns it off.
    """

    name: str
    shape: tuple[str | int, ...]
    dtype: str | None = None
    kind: str = "normal"
    low: float | str | None = None
    high: float | str | None = None
    contiguous: bool = False
    requires_grad: bool = False
    max_magnitude: float | None = None
    hits: str | bool | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))
        if self.max_magnitude is not None and not (isinstance(self.max_magnitude, (int, float))
                                                   and self.max_magnitude > 0):
            raise SpecError(f"TensorSpec {self.name!r}: max_magnitude must be a positive number, "
                            f"not {self.max_magnitude!r}")
        if self.hits is True or (self.hits is not None and not isinstance(self.hits, (str, bool))):
            raise SpecError(f"TensorSpec {self.name!r}: hits= takes the name of another input (or False to turn the "
                            f"default off), not {self.hits!r}")
        if isinstance(self.hits, str) and self.kind != "index":
            raise SpecError(f"TensorSpec {self.name!r}: hits= applies to kind='index' inputs only")
        if self.kind not in VALUE_KINDS:
            raise SpecError(f"TensorSpec {self.name!r}: kind {self.kind!r} is not one of {', '.join(VALUE_KINDS)}")
        if self.dtype is not None and self.dtype not in KNOWN_DTYPES:
            raise SpecError(f"TensorSpec {self.name!r}: dtype {self.dtype!r} is not one of {', '.join(KNOWN_DTYPES)}")
        for dim in self.shape:
            if not isinstance(dim, (str, int)) or isinstance(dim, bool):
                raise SpecError(f"TensorSpec {self.name!r}: shape entry {dim!r} must be a dim name or an int")

    def concrete_shape(self, dims: Mapping[str, int]) -> tuple[int, ...]:
        """The shape at these sizes; `dims` must hold derived dims too (Operator.with_derived)."""
        return tuple(dims[d] if isinstance(d, str) else d for d in self.shape)

    def promised_magnitude(self) -> float | None:
        """The largest |value| this input promises (None: a bounded kind, whose bounds are its range)."""
        if self.max_magnitude is not None:
            return float(self.max_magnitude)
        return DEFAULT_MAX_MAGNITUDE.get(self.kind)


@dataclass(frozen=True)
class Scalar:
    """A non-tensor argument passed as-is (e.g. eps=1e-6, dim=-1)."""

    name: str
    value: Any


@dataclass(frozen=True)
class Implementation:
    name: str
    backend: str
    fn: Callable[..., Any]


@dataclass
class Operator:
    """An operator's meaning (the reference), its inputs, the sizes and dtypes that matter, and implementations."""

    name: str
    reference: Callable[..., Any]
    inputs: Sequence[TensorSpec | Scalar]
    dims: Mapping[str, Sequence[int]] = field(default_factory=dict)
    dtypes: Sequence[str] = ("float32",)
    flops: Callable[..., float] | None = None
    bytes: Callable[..., float] | None = None  # bytes(itemsize=..., **dims): optional traffic model
    propagates_nonfinite: bool = True
    tolerance: Mapping[str, Mapping[str, float]] | None = None  # {"float16": {"atol": .., "rtol": ..}}
    quantized: Mapping[str, Any] | None = None  # {"scale": 0.0156, "zero_point": 0, "dtype": "int8"}
    implementations: dict[str, Implementation] = field(default_factory=dict)
    onnx_model_path: Path | None = None
    spec_file: Path | None = None
    # Dims opgate must not fuzz: only their declared sizes are used (e.g. a head dim a kernel requires
    # to be 64 or 128). Every other dim also gets opgate's edge sizes (1, primes, 2^k +- 1, ...).
    exact_dims: Sequence[str] = ()
    # The production-like size the GPU runtime stage times and profiles (e.g. {"M": 16384, "N": 4096}):
    # correctness sizes are small and edge-shaped, and at those a kernel's time is mostly launch overhead.
    # Dims left out take their largest declared size.
    perf_dims: Mapping[str, int] | None = None
    # Dims computed from other dims, e.g. {"H": lambda D: D // 2} for a rotary table of D/2 columns: the
    # function's parameter names are dims; derived dims are never fuzzed themselves.
    derived_dims: Mapping[str, Callable[..., int]] = field(default_factory=dict)
    # "ignore": an implementation may drop NaNs the reference propagates (an fmaxf-style max); "propagate":
    # a NaN the reference propagates must come out as NaN.
    nan_policy: str = "propagate"
    # "any": flushing subnormal inputs/outputs to zero (-ftz=true, --use_fast_math) is a documented deviation
    # (warned); "exact": it is a failure.
    subnormals: str = "any"
    # The latency SLO of one call at `perf_dims`, P95 in microseconds: the verify stage `qos` judges it alone,
    # beside a saturating neighbour, with stream priority and under MPS. None: percentiles only, no verdict.
    slo_p95_us: float | None = None

    def __post_init__(self) -> None:
        if not callable(self.reference):
            raise SpecError(f"operator {self.name!r}: reference must be callable")
        self.inputs = list(self.inputs)
        if isinstance(self.dtypes, str):  # list("float32") would be dtypes 'f', 'l', ...
            raise SpecError(f"operator {self.name!r}: dtypes={self.dtypes!r} is a string; give a list, e.g. "
                            f"dtypes=[{self.dtypes!r}]")
        self.dtypes = list(self.dtypes)
        if not self.dtypes:  # an operator with no dtype would be dropped while the others pass
            raise SpecError(f"operator {self.name!r}: dtypes is empty; list at least one, e.g. dtypes=['float32']")
        for dim, sizes in dict(self.dims).items():
            if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
                raise SpecError(f"operator {self.name!r}: dims[{dim!r}] = {sizes!r} is not a list of sizes; give e.g. "
                                f"dims={{{dim!r}: [{sizes!r}]}}")
        self.dims = {k: list(v) for k, v in dict(self.dims).items()}
        for dtype in self.dtypes:
            if dtype not in KNOWN_DTYPES:
                raise SpecError(f"operator {self.name!r}: dtype {dtype!r} is not one of {', '.join(KNOWN_DTYPES)}")
        if self.nan_policy not in NAN_POLICIES:
            raise SpecError(f"operator {self.name!r}: nan_policy {self.nan_policy!r} is not one of "
                            f"{', '.join(NAN_POLICIES)}")
        if self.subnormals not in SUBNORMAL_POLICIES:
            raise SpecError(f"operator {self.name!r}: subnormals {self.subnormals!r} is not one of "
                            f"{', '.join(SUBNORMAL_POLICIES)}")
        if self.slo_p95_us is not None and (isinstance(self.slo_p95_us, bool) or
                                            not isinstance(self.slo_p95_us, (int, float)) or self.slo_p95_us <= 0):
            raise SpecError(f"operator {self.name!r}: slo_p95_us must be a positive number of microseconds, "
                            f"not {self.slo_p95_us!r}")
        self.derived_dims = dict(self.derived_dims or {})
        for dim, rule in self.derived_dims.items():
            if dim in self.dims:
                raise SpecError(f"operator {self.name!r}: derived dim {dim!r} is also listed in `dims`; keep one")
            if not callable(rule):
                raise SpecError(f"operator {self.name!r}: derived_dims[{dim!r}] must be a function of other dims, "
                                "e.g. lambda D: D // 2")
            for param in _parameter_names(rule):
                if param not in self.dims:
                    raise SpecError(f"operator {self.name!r}: derived_dims[{dim!r}] takes {param!r}, which `dims` "
                                    "does not list")
        names = set()
        for inp in self.inputs:
            if inp.name in names:
                raise SpecError(f"operator {self.name!r}: input name {inp.name!r} appears twice")
            names.add(inp.name)
            if isinstance(inp, TensorSpec):
                for dim in inp.shape:
                    if isinstance(dim, str) and dim not in self.dims and dim not in self.derived_dims:
                        raise SpecError(
                            f"operator {self.name!r}: input {inp.name!r} uses dim {dim!r}, which `dims` does not list"
                        )
        for dim, sizes in self.dims.items():
            if not sizes or any((not isinstance(s, int)) or isinstance(s, bool) or s < 0 for s in sizes):
                raise SpecError(f"operator {self.name!r}: dims[{dim!r}] must be a non-empty list of ints >= 0 "
                                f"(0 for empty tensors), not {list(sizes)!r}")
        self.exact_dims = list(self.exact_dims)
        for dim in self.exact_dims:
            if dim not in self.dims:
                raise SpecError(f"operator {self.name!r}: exact_dims names {dim!r}, which `dims` does not list")
        self.perf_dims = dict(self.perf_dims or {})
        for dim, size in self.perf_dims.items():
            if dim not in self.dims:
                raise SpecError(f"operator {self.name!r}: perf_dims names {dim!r}, which `dims` does not list")
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise SpecError(f"operator {self.name!r}: perf_dims[{dim!r}] must be a positive int, not {size!r}")
            if dim in self.exact_dims and size not in self.dims[dim]:
                raise SpecError(f"operator {self.name!r}: perf_dims[{dim!r}]={size} is not one of the sizes "
                                f"exact dim {dim!r} allows ({self.dims[dim]})")
        for inp in self.tensor_inputs:
            for bound_name, bound in (("low", inp.low), ("high", inp.high)):
                if isinstance(bound, str) and bound not in self.dims and bound not in self.derived_dims:
                    raise SpecError(
                        f"operator {self.name!r}: input {inp.name!r} has {bound_name}={bound!r}, "
                        "which is neither a number nor a dim listed in `dims`"
                    )
            if isinstance(inp.hits, str):
                target = next((t for t in self.tensor_inputs if t.name == inp.hits), None)
                if target is None or target is inp:
                    raise SpecError(f"operator {self.name!r}: input {inp.name!r} has hits={inp.hits!r}, which is "
                                    "not another tensor input of this operator")
                if self.tensor_inputs.index(target) > self.tensor_inputs.index(inp):
                    raise SpecError(f"operator {self.name!r}: input {inp.name!r} hits {target.name!r}, which is "
                                    "declared after it; declare the target input first")
                if tuple(target.shape[:-1]) != tuple(inp.shape):
                    raise SpecError(f"operator {self.name!r}: input {inp.name!r} (shape {inp.shape}) hits the argmax "
                                    f"of {target.name!r} (shape {target.shape}): its shape must be {target.name!r}'s "
                                    "without the last dim")
            if inp.kind == "index" and inp.high is None:
                raise SpecError(
                    f"operator {self.name!r}: input {inp.name!r} has kind='index' but no high=; "
                    "give the exclusive upper bound (a number or a dim name, e.g. high='V')"
                )

    @property
    def tensor_inputs(self) -> list[TensorSpec]:
        return [i for i in self.inputs if isinstance(i, TensorSpec)]

    def hits_target(self, inp: TensorSpec) -> str | None:
        """The input whose argmax `inp`'s indices partly hit: hits= as given, else (kind "index", high a dim name)
        the first earlier float input whose shape is `inp`'s plus that dim (labels beside their logits): a
        confident-label bug is then found without the spec author knowing to ask. hits=False: none."""
        if isinstance(inp.hits, str):
            return inp.hits
        if inp.hits is False or inp.kind != "index" or not isinstance(inp.high, str):
            return None
        inputs = self.tensor_inputs
        for target in inputs[:inputs.index(inp)]:
            if (target.kind in ("normal", "logits", "uniform", "positive") and target.shape
                    and target.shape[-1] == inp.high and tuple(target.shape[:-1]) == tuple(inp.shape)):
                return target.name
        return None

    def implementation(self, name: str, backend: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register an implementation. `backend` defaults to `name` when `name` is a known backend."""
        if backend is None:
            if name not in known_backends():
                raise SpecError(
                    f"operator {self.name!r}: implementation {name!r} needs backend=, one of {', '.join(known_backends())}"
                )
            backend = name
        if backend not in known_backends():
            raise SpecError(f"operator {self.name!r}: backend {backend!r} is not one of {', '.join(known_backends())}")

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            if name in self.implementations:
                raise SpecError(f"operator {self.name!r}: implementation {name!r} is registered twice")
            self.implementations[name] = Implementation(name=name, backend=backend, fn=fn)
            return fn

        return register

    def onnx_model(self, path: str | Path) -> None:
        """Use this ONNX model (relative to the spec file) as the `onnxruntime` implementation."""
        self.onnx_model_path = Path(path)

    @property
    def gradient_inputs(self) -> list[TensorSpec]:
        return [i for i in self.tensor_inputs if i.requires_grad]

    def with_derived(self, dims: Mapping[str, int]) -> dict[str, int]:
        """`dims` plus every derived dim computed from them."""
        full = dict(dims)
        for dim, rule in self.derived_dims.items():
            value = rule(**{p: full[p] for p in _parameter_names(rule)})
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SpecError(f"operator {self.name!r}: derived_dims[{dim!r}] returned {value!r} at {dict(dims)}; "
                                "it must return an int >= 0")
            full[dim] = value
        return full

    def default_dims(self) -> dict[str, int]:
        """The first declared size of every dim (derived dims included): the case analyze and quick checks use."""
        return self.with_derived({dim: sizes[0] for dim, sizes in self.dims.items()})

    def timing_dims(self) -> dict[str, int]:
        """The size the runtime stage times: `perf_dims`, else the largest declared size of each dim."""
        dims = {dim: max(sizes) for dim, sizes in self.dims.items()}
        dims.update(self.perf_dims or {})
        return self.with_derived(dims)


def _parameter_names(rule: Callable[..., Any]) -> list[str]:
    import inspect

    try:
        return list(inspect.signature(rule).parameters)
    except (TypeError, ValueError):
        return []


def spec_module_name(path: str | Path) -> str:
    """The name a spec file's module has in sys.modules once load_spec_file imported it in this process."""
    return f"opgate_spec_{abs(hash(str(Path(path).resolve())))}"


def load_spec_file(path: str | Path) -> list[Operator]:
    """Import a spec file and return the Operators it defines, in definition order.

    Raises SpecError with a one-line message when the file is missing, fails to import, or defines none.
    """
    path = Path(path)
    if not path.is_file():
        from opgate.model.errors import why_missing

        reason = why_missing(path) if not path.exists() else "is not a file"
        raise SpecError(f"spec file {path} {reason}; pass the path of a Python file that defines opgate.Operator "
                        "objects")
    from opgate.core.torch_kernels import remember_native_kernels

    remember_native_kernels()  # before the spec's imports can replace any of torch's GPU kernels
    module_name = spec_module_name(path)
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise SpecError(f"spec file {path} cannot be imported as Python; give it a .py name")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except SpecError as exc:
        raise SpecError(f"spec file {path}: {exc}") from None
    except Exception as exc:
        raise SpecError(f"spec file {path} failed to import: {type(exc).__name__}: {exc}") from None
    operators = [v for v in vars(module).values() if isinstance(v, Operator)]
    if not operators:
        raise SpecError(f"spec file {path} defines no opgate.Operator; see the README for the spec format")
    for op in operators:
        op.spec_file = path.resolve()
        if op.onnx_model_path is not None and not op.onnx_model_path.is_absolute():
            op.onnx_model_path = (path.parent / op.onnx_model_path).resolve()
    return operators
