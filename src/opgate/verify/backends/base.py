"""What every backend shares: which implementations an op has, and how a Python function is called.

Calling convention: an implementation is called positionally with the op's inputs in declaration
order (tensors on the implementation's device, in the case's memory layout; scalars as-is) and
returns one tensor or a tuple of them, like the reference.

Output poisoning: if the function accepts a keyword parameter named `out`, opgate allocates the
output buffer(s) itself (one tensor, or a tuple when the reference returns several), fills them
with NaN (floats) or the dtype's maximum (integers), passes `out=`, and reads the result from the
buffers. Elements still holding the poison are re-checked with a second poison (a large negative
float / the dtype's minimum): an element that kept both was never written. Independently, PyTorch's
`fill_uninitialized_memory` makes every torch.empty() inside an implementation NaN/max-filled, so
a kernel that skips elements of a buffer it allocated itself shows NaN instead of stale memory. When such an
output holds NaN, the implementation is called once more with every torch.empty()/empty_like()/new_empty() it
makes filled with the second poison instead (`_SecondPoisonMode`): an element that is NaN after the first call and
the second poison after the second was never written (not computed as NaN), and is counted as unwritten.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

from opgate.model.errors import InputError
from opgate.model.results import Figure
from opgate.verify.inputs import apply_layout
from opgate.core.spec import Operator

class Backend:
    """A runtime implementations can need, registered in the `opgate.verify.backends` entry-point group (name =
    the `backend=` a spec writes). Subclass, set the class attributes, implement `prepare`; a plugin package
    registers its own the same way the shipped ones do (pyproject.toml)."""

    name: ClassVar[str] = ""
    # The user's implementations on it get verify's GPU stages (runtime, sanitizer, recovery, ...).
    gpu_stages: ClassVar[bool] = False
    # opgate also runs the reference through it as an extra (`--extras`); lower ranks are listed first.
    extra: ClassVar[bool] = False
    extra_rank: ClassVar[int] = 100
    # Rough seconds its first check spends compiling (a scheduling hint: the slowest start first).
    startup_s: ClassVar[float] = 1.0

    def case_cost_weight(self, gpu: bool) -> float:
        """How heavily one case weighs against the operator's time budget, relative to an emulated or compiling
        backend (1.0): a check's share of `--time-budget` grows with its weight (verify/time_budget.py). Eager
        backends run a case in milliseconds and take a small share."""
        return 0.25

    def prepare(self, choice: "ImplementationChoice", op: Operator, dtype: str,
                workdir: Path) -> "PreparedImplementation":  # pragma: no cover - abstract
        """Runs inside the implementation's own child; raises SkipCheck when the runtime is unusable here."""
        raise NotImplementedError

    def warm_up(self) -> None:
        """Runs in a prestarted warm worker while the parent calibrates (verify/warm_up.py WarmUpCheck): pay
        what the first check would otherwise pay on the critical path (imports, a compiler's first start). It must
        leave no state a check could see."""

    def child_env(self, gpu: bool) -> dict[str, str]:
        """Environment the child process must start with (read at import time, e.g. TRITON_INTERPRET)."""
        return {}

    def unavailable_reason(self) -> str | None:
        """Why this backend cannot run on this machine at all (then its checks are `skipped` up front)."""
        return None

    def interpreter_limitations(self, prepared: "PreparedImplementation", dtype: str) -> list[str]:
        """The operations this backend's CPU interpreter (an emulation standing in for the GPU) still computes
        inexactly in `dtype` in this process, for `prepared` (what `prepare` returned). The numerics check reports
        failing cases there as the `interpreter` deviation, not judged: the GPU run decides. Default: none."""
        return []


# (shape, dtype name) of every output the reference returns: what an out= buffer must look like.
OutSpecs = Sequence[tuple[tuple[int, ...], str]]


@dataclass(frozen=True)
class ImplementationChoice:
    """One thing `opgate verify` runs: a user implementation, the user's ONNX model, or the reference
    compiled/exported by opgate itself (origin "reference")."""

    name: str
    backend: str
    origin: str  # "user" | "onnx_model" | "reference"

    def describe(self) -> str:
        if self.origin == "reference":
            return f"the reference through {self.backend} (added by opgate)"
        if self.origin == "onnx_model":
            return "the spec's ONNX model on ONNX Runtime"
        return f"implementation {self.name!r} ({self.backend})"


def implementation_choices(op: Operator, extras: bool = True) -> list[ImplementationChoice]:
    """The user's implementations in registration order, then the ONNX model, then opgate's extras:
    the reference through torch.compile, through ONNX Runtime (unless the op has an ONNX implementation)
    and through TVM."""
    choices = [ImplementationChoice(i.name, i.backend, "user") for i in op.implementations.values()]
    names = {c.name for c in choices}

    def free(name: str) -> str:
        return name if name not in names else f"{name}(reference)"

    if op.onnx_model_path is not None:
        name = "onnxruntime" if "onnxruntime" not in names else "onnx_model"
        choices.append(ImplementationChoice(name, "onnxruntime", "onnx_model"))
        names.add(name)
    if extras:
        has_backend = {c.backend for c in choices}
        # a derived gradient operator (verify/gradients.py) narrows this: ONNX/TVM export no autograd
        from opgate.verify.backends import extra_backend_names

        for backend in getattr(op, "extra_backends", None) or extra_backend_names():
            if backend == "onnxruntime" and "onnxruntime" in has_backend:
                continue
            name = free(backend)
            choices.append(ImplementationChoice(name, backend, "reference"))
            names.add(name)
    return choices


def find_choice(op: Operator, name: str, extras: bool = True) -> ImplementationChoice:
    for choice in implementation_choices(op, extras):
        if choice.name == name:
            return choice
    known = ", ".join(c.name for c in implementation_choices(op, extras))
    raise InputError(f"operator {op.name!r} has no implementation {name!r}; choose from: {known}")


def implementation_function(op: Operator, choice: ImplementationChoice) -> Callable[..., Any]:
    if choice.origin == "reference":
        return op.reference
    if choice.origin == "user":
        return op.implementations[choice.name].fn
    raise ValueError(f"{choice.describe()} has no Python function")


@dataclass
class RunOutput:
    outputs: list[Any]  # tensors on the device they were computed on (or whatever the implementation
    # returned, for the comparator to reject); judge_case compares each where it is
    unwritten: list[int]  # per output: elements never written (poisoned out= buffer, or torch.empty's fill)
    unwritten_spans: list[tuple[int, int]] = field(default_factory=list)  # per output: first/last flat index
    # The implementation returned one tensor (True) or a tuple/list (False); None where the backend's runner
    # decides the form (ONNX Runtime and TVM return lists, an out= call fills buffers)
    single: bool | None = None


@dataclass(frozen=True)
class BackendLimitation:
    """An exception of the implementation that is the backend's own limit on this machine, not the implementation's
    error (a construct Triton's CPU interpreter cannot run): the deviation class it is reported as, what it is, and
    where it can be judged. A case it stops is not judged here; its reason line round-trips through `reason()`."""

    deviation: str  # a class of opgate.verify.deviations.DEVIATION_CLASSES
    what: str
    remedy: str

    PREFIX: ClassVar[str] = "not judged here"

    def reason(self) -> str:
        return f"{self.PREFIX} [{self.deviation}]: {self.what}; {self.remedy}"

    @classmethod
    def from_reason(cls, reason: str) -> "BackendLimitation | None":
        match = re.match(rf"{cls.PREFIX} \[(\w+)\]: (.*); ([^;]*)$", reason, re.S)
        return cls(match.group(1), match.group(2), match.group(3)) if match else None


@dataclass
class PreparedImplementation:
    """A ready-to-call implementation plus the facts its backend found (device, opset, graph breaks ...)."""

    choice: ImplementationChoice
    device: str
    run: Callable[[Sequence[Any], Sequence[str], OutSpecs], RunOutput]  # (values, layouts, out specs)
    facts: dict[str, Any] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    poisoned_out: bool = False
    collect_artefacts: Callable[[Path], list[str]] | None = None
    finish: Callable[[], None] | None = None  # called after all cases: gather late facts (e.g. recompiles)
    # called when the check is done with the implementation, also after an error: undo what the backend changed
    # process-wide for the check (the Triton autotuner's config choice), so the next check in the worker is clean
    release: Callable[[], None] | None = None
    # after each case: what the backend chose for it that a reader needs to reproduce it (the config each
    # autotuned kernel ran); "" when nothing
    case_note: Callable[[], str] | None = None
    # the backend's own limit an exception of the implementation shows (None: the implementation's error)
    limitation_of: Callable[[BaseException], BackendLimitation | None] | None = None


def torch_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def enable_empty_poisoning() -> None:
    """torch.empty() and friends return NaN / the integer maximum instead of stale memory."""
    import warnings

    import torch

    from opgate.engine.torch_modes import set_deterministic

    set_deterministic(torch, True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    warnings.filterwarnings("ignore", message=".*does not have a deterministic implementation.*")


def accepts_out(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    param = params.get("out")
    return param is not None and param.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _poison_values(dtype: Any) -> tuple[Any, Any]:
    import math

    import torch

    if dtype.is_floating_point:
        return math.nan, torch.finfo(dtype).min / 3
    if dtype == torch.bool:
        return True, False
    info = torch.iinfo(dtype)
    return info.max, info.min


def _poisoned(shape: tuple[int, ...], dtype_name: str, device: str, second: bool) -> Any:
    import torch

    dtype = getattr(torch, dtype_name)
    value = _poison_values(dtype)[1 if second else 0]
    return torch.full(shape, value, dtype=dtype, device=device)


def _still_poison(buffer: Any, second: bool) -> Any:
    import torch

    value = _poison_values(buffer.dtype)[1 if second else 0]
    if buffer.dtype.is_floating_point and not second:
        return torch.isnan(buffer)
    reference = torch.full((), value, dtype=buffer.dtype, device=buffer.device)
    return buffer == reference


# Factories whose memory is uninitialized: what an implementation allocates its output with.
_EMPTY_FACTORIES = ("empty", "empty_like", "empty_strided")
_EMPTY_METHODS = ("new_empty", "new_empty_strided")


def _second_poison_mode() -> Any:
    """A TorchFunctionMode that fills every tensor an uninitialized-memory factory returns with the second poison."""
    import torch
    from torch.overrides import TorchFunctionMode

    factories = {getattr(torch, name) for name in _EMPTY_FACTORIES}
    methods = {getattr(torch.Tensor, name) for name in _EMPTY_METHODS}

    class _SecondPoisonMode(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            result = func(*args, **(kwargs or {}))
            if (func in factories or func in methods) and isinstance(result, torch.Tensor) and result.numel():
                with torch.no_grad():
                    result.fill_(_poison_values(result.dtype)[1])
            return result

    return _SecondPoisonMode()


def _float_nan_masks(outputs: Sequence[Any]) -> list[Any] | None:
    """Per output: where a float tensor holds NaN (None for other outputs); None when no output has a NaN."""
    import torch

    masks = [torch.isnan(o) if isinstance(o, torch.Tensor) and o.dtype.is_floating_point else None for o in outputs]
    return masks if any(m is not None and bool(m.any()) for m in masks) else None


def _span(mask: Any) -> tuple[int, int]:
    """First and last flat index where `mask` holds, (-1, -1) when nowhere."""
    import torch

    where = torch.nonzero(mask.reshape(-1)).reshape(-1)
    return (int(where[0]), int(where[-1])) if where.numel() else (-1, -1)


def function_runner(fn: Callable[..., Any], device: str, use_out: bool,
                    to_device: Callable[[Any], Any] | None = None) -> Callable[..., RunOutput]:
    """Call a Python implementation on `device` with the conventions in the module docstring."""
    import torch

    def move(value: Any, layout: str) -> Any:
        if isinstance(value, torch.Tensor):
            moved = to_device(value) if to_device else value.to(device)
            return apply_layout(moved, layout)  # build strides on the device: .to() would densify them
        return value

    def call(args: Sequence[Any], out_specs: OutSpecs, second: bool) -> tuple[Any, Any]:
        if not use_out:
            return fn(*args), None
        buffers = [_poisoned(shape, dtype, device, second) for shape, dtype in out_specs]
        out = buffers[0] if len(buffers) == 1 else tuple(buffers)
        fn(*args, out=out)
        return buffers, buffers

    def run(values: Sequence[Any], layouts: Sequence[str], out_specs: OutSpecs) -> RunOutput:
        args = [move(v, layout) for v, layout in zip(values, layouts)]
        with torch.no_grad():
            result, buffers = call(args, out_specs, second=False)
            unwritten = [0] * len(out_specs)
            spans: list[tuple[int, int]] = [(-1, -1)] * len(out_specs)
            if buffers is not None:
                first = [_still_poison(b, second=False) for b in buffers]
                if any(bool(m.any()) for m in first):
                    _, again = call(args, out_specs, second=True)
                    kept = [m & _still_poison(b, second=True) for m, b in zip(first, again)]
                    unwritten = [int(k.sum()) for k in kept]
                    spans = [_span(k) for k in kept]
        outputs = result if isinstance(result, (list, tuple)) else [result]
        if device != "cpu":
            torch.cuda.synchronize()
        # the outputs stay where they were computed: judge_case compares them there (a GPU's on the GPU)
        outputs = [o.detach() if isinstance(o, torch.Tensor) else o for o in outputs]
        nan_masks = _float_nan_masks(outputs) if buffers is None else None
        if nan_masks is not None:  # NaN computed, or torch.empty's NaN fill never overwritten? ask a second time
            # copies first: an implementation that hands back the same buffer on every call would otherwise see
            # its first outputs overwritten by the second call's
            outputs = [o.clone() if isinstance(o, torch.Tensor) else o for o in outputs]
            try:
                with torch.no_grad(), _second_poison_mode():
                    again = fn(*args)
                if device != "cpu":
                    torch.cuda.synchronize()
            except Exception:  # the first call's verdict stands; the second only tells unwritten from computed NaN
                again = []
            again = again if isinstance(again, (list, tuple)) else [again]
            unwritten, spans = [], []
            for mask, output, second in zip(nan_masks, outputs, list(again) + [None] * len(outputs)):
                if mask is None or not isinstance(second, torch.Tensor) or second.shape != output.shape:
                    unwritten.append(0)
                    spans.append((-1, -1))
                    continue
                kept = mask & _still_poison(second.detach().to(mask.device), second=True)
                unwritten.append(int(kept.sum()))
                spans.append(_span(kept))
        return RunOutput(outputs, unwritten, spans, single=isinstance(result, torch.Tensor) if buffers is None else None)

    return run
