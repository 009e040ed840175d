"""The work model of an operator: FLOPs and DRAM bytes of one case, and its roofline point on a GPU.

Shared by `opgate analyze` (floors per GPU) and `opgate verify`'s runtime stage (achieved fraction): part of the
core domain, so neither imports the other. The method is described in opgate/analyze/roofline.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from opgate.core.dtypes import ITEMSIZE
from opgate.model.errors import InputError
from opgate.core.gpus import GpuModel

# Which catalogue precisions can execute an operator in a given dtype (the highest listed rate is used).
DTYPE_PRECISIONS: Mapping[str, tuple[str, ...]] = {
    "float64": ("fp64", "fp64_tc"),
    "float32": ("fp32",),
    "float16": ("fp16",),
    "bfloat16": ("bf16",),
    "float8_e4m3fn": ("fp8",),
    "float8_e5m2": ("fp8",),
    "int8": ("int8",),
    "uint8": ("int8",),
}


@dataclass(frozen=True)
class OperatorWork:
    """The work one case of an operator does: FLOPs and DRAM bytes, and where each number came from."""

    operator: str
    dtype: str
    dims: Mapping[str, int]
    flops: float
    bytes: float
    flops_source: str
    bytes_source: str

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per byte."""
        return self.flops / self.bytes if self.bytes else float("inf")

    @property
    def shape_label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.dims.items()) or "-"


@dataclass(frozen=True)
class RooflinePoint:
    gpu: str  # catalogue key
    gpu_name: str
    work: OperatorWork
    precision: str
    peak_ops_per_s: float
    bandwidth_bytes_per_s: float
    measured_s: float | None = None
    uncertain: tuple[str, ...] = ()  # catalogue fields behind this point that are marked uncertain

    @property
    def compute_s(self) -> float:
        return self.work.flops / self.peak_ops_per_s

    @property
    def memory_s(self) -> float:
        return self.work.bytes / self.bandwidth_bytes_per_s

    @property
    def floor_s(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def ridge_intensity(self) -> float:
        """FLOP/byte where the roofs meet: below it a kernel is memory-bound."""
        return self.peak_ops_per_s / self.bandwidth_bytes_per_s

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s > self.memory_s else "memory"

    @property
    def attainable_ops_per_s(self) -> float:
        return min(self.peak_ops_per_s, self.work.intensity * self.bandwidth_bytes_per_s)

    @property
    def achieved_fraction(self) -> float | None:
        """floor / measured: 1.0 means the kernel runs at the roofline."""
        if self.measured_s is None or self.measured_s <= 0:
            return None
        return self.floor_s / self.measured_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu, "gpu_name": self.gpu_name, "dtype": self.work.dtype, "dims": dict(self.work.dims),
            "precision": self.precision, "flops": self.work.flops, "bytes": self.work.bytes,
            "flops_source": self.work.flops_source, "bytes_source": self.work.bytes_source,
            "intensity_flop_per_byte": self.work.intensity if self.work.bytes else None,
            "peak_ops_per_s": self.peak_ops_per_s, "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "ridge_intensity": self.ridge_intensity, "bound": self.bound, "compute_s": self.compute_s,
            "memory_s": self.memory_s, "floor_s": self.floor_s, "measured_s": self.measured_s,
            "achieved_fraction": self.achieved_fraction, "uncertain_catalogue_fields": list(self.uncertain),
        }


# -- counting work ---------------------------------------------------------------------------------------------

def _reference_arguments(op: Any, dims: Mapping[str, int], dtype: str, device: str) -> list[Any]:
    import torch

    from opgate.core.spec import Scalar

    arguments: list[Any] = []
    for inp in op.inputs:
        if isinstance(inp, Scalar):
            arguments.append(inp.value)
        else:
            arguments.append(torch.zeros(inp.concrete_shape(_full_dims(op, dims)), dtype=getattr(torch, inp.dtype or dtype),
                                         device=device))
    return arguments


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []


def _run_reference(op: Any, dims: Mapping[str, int], dtype: str) -> tuple[float, list[Any], str]:
    """FLOPs counted by FlopCounterMode and the reference's outputs, on meta tensors if possible."""
    from torch.utils.flop_counter import FlopCounterMode

    last_error: Exception | None = None
    for device in ("meta", "cpu"):
        try:
            arguments = _reference_arguments(op, dims, dtype, device)
            counter = FlopCounterMode(display=False)
            with counter:
                outputs = op.reference(*arguments)
            return float(counter.get_total_flops()), _tensors(outputs), device
        except Exception as exc:  # the reference may not run on meta (e.g. .item()); try real CPU tensors
            last_error = exc
    # The reference is the user's input: exit 2 with the exception, never "a bug in opgate".
    raise InputError(f"spec file {op.spec_file}: the reference of {op.name!r} could not run to count its work: "
                     f"{type(last_error).__name__}: {last_error}; fix the reference or the dims it is given")


def operator_work(op: Any, dtype: str, dims: Mapping[str, int]) -> OperatorWork:
    """FLOPs and bytes of one (dtype, dims) case of `op` (an opgate.Operator)."""
    itemsize = ITEMSIZE[dtype]
    flops: float | None = None
    flops_source = "declared flops()"
    outputs: list[Any] | None = None
    if op.flops is not None:
        flops = float(op.flops(**dims))
    else:
        flops, outputs, device = _run_reference(op, dims, dtype)
        flops_source = (f"torch.utils.flop_counter on {device} tensors"
                        + (" (counts matmul/conv/attention only: 0 here; declare flops=)" if flops == 0 else ""))
    if op.bytes is not None:
        nbytes = float(op.bytes(itemsize=itemsize, **dims))
        bytes_source = "declared bytes()"
    else:
        if outputs is None:
            _, outputs, _ = _run_reference(op, dims, dtype)
        read = sum(ITEMSIZE[inp.dtype or dtype] * _numel(inp.concrete_shape(_full_dims(op, dims))) for inp in op.tensor_inputs)
        written = sum(t.numel() * t.element_size() for t in outputs)
        nbytes = float(read + written)
        bytes_source = "inputs read once + outputs written once"
    return OperatorWork(op.name, dtype, dict(dims), flops, nbytes, flops_source, bytes_source)


def operator_work_stored(op: Any, dtype: str, dims: Mapping[str, int], path: str | Path | None) -> OperatorWork:
    """operator_work, kept in `path` (JSON) for the next process that asks with the same path: the runtime stage's
    warm-up counts it side by side, its exclusive measurement reads it (a gradient twin's count runs its reference at
    the timing size on the CPU: 6-10 s of a twin's 2.8-11 s runtime check on the H200 host, with the GPU held
    alone). A stored count of other dims or dtype is counted again."""
    import json

    stored = Path(path) if path else None
    if stored is not None:
        try:
            data = json.loads(stored.read_text())
            if data.get("dims") == dict(dims) and data.get("dtype") == dtype and data.get("operator") == op.name:
                return OperatorWork(**data)
        except (OSError, ValueError, TypeError):
            pass
    work = operator_work(op, dtype, dims)
    if stored is not None:
        from opgate.engine.atomic import write_atomically

        try:
            stored.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(stored, json.dumps({**dataclasses.asdict(work), "dims": dict(work.dims)}), durable=False)
        except OSError:  # the count is only a head start for the measurement
            pass
    return work


def _numel(shape: Sequence[int]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


# -- floors -----------------------------------------------------------------------------------------------------

def peak_for(gpu: GpuModel, dtype: str) -> tuple[str, float] | None:
    """(catalogue precision, ops/s) of the highest dense rate for `dtype` on `gpu`; None when it has none."""
    best: tuple[str, float] | None = None
    for precision in DTYPE_PRECISIONS.get(dtype, ()):
        rate = gpu.peak_ops_per_s(precision)
        if rate is not None and (best is None or rate > best[1]):
            best = (precision, rate)
    return best


def roofline_point(work: OperatorWork, gpu: GpuModel, measured_s: float | None = None) -> RooflinePoint | None:
    peak = peak_for(gpu, work.dtype)
    if peak is None:
        return None
    precision, rate = peak
    uncertain = tuple(f for f in gpu.uncertain_fields
                      if f in ("memory_bandwidth_gbs", f"dense_tflops.{precision}"))
    return RooflinePoint(gpu.key, gpu.name, work, precision, rate, gpu.bandwidth_bytes_per_s, measured_s, uncertain)


def _full_dims(op: Any, dims: Mapping[str, int]) -> dict[str, int]:
    """`dims` with the spec's derived dims (Operator.derived_dims) filled in."""
    with_derived = getattr(op, "with_derived", None)
    return with_derived({k: v for k, v in dims.items() if k not in getattr(op, "derived_dims", {})}) \
        if with_derived else dict(dims)
