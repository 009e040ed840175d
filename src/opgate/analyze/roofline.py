"""Roofline floors: the fastest an operator could possibly run on each GPU, per dtype and shape.

    floor = max(flops / peak(precision), bytes / DRAM bandwidth)

FLOPs come from the operator's `flops(**dims)`; without it, torch.utils.flop_counter.FlopCounterMode runs the
reference on meta tensors (CPU tensors if the reference cannot run on meta). FlopCounterMode counts matmul,
convolution and attention FLOPs only: an elementwise or reduction operator counts 0 and is judged on its
memory floor alone (declare `flops=` for an exact figure). Bytes come from `bytes(itemsize=..., **dims)`, or
each input read once and each output written once (the minimum DRAM traffic when nothing stays in cache).

The peak for a dtype is the highest dense rate the catalogue lists for that precision (tensor cores where the
GPU has them; FP64 takes the FP64 tensor-core rate where there is one); float32 uses the CUDA-core FP32 rate
(TF32 changes numerics, so it is opt-in in torch and not assumed). A floor is a lower bound, so it errs fast.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from opgate.errors import InputError
from opgate.gpus import GpuModel

MAX_SHAPES = 64  # dims combinations per dtype beyond this are dropped, in declaration order

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
ITEMSIZE = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int64": 8, "bool": 1,
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


@dataclass(frozen=True)
class RooflineAnalysis:
    operator: str
    points: tuple[RooflinePoint, ...]
    skipped: tuple[str, ...] = ()  # why some (GPU, dtype) pairs have no point
    notes: tuple[str, ...] = ()
    charts: tuple[Path, ...] = field(default_factory=tuple)


def measurement_key(gpu: str, dtype: str, dims: Mapping[str, int]) -> tuple[str, str, tuple[tuple[str, int], ...]]:
    """Key of `measured` in `analyze_operator`: (GPU key, dtype, sorted dims)."""
    return gpu, dtype, tuple(sorted(dims.items()))


def dims_cases(dims: Mapping[str, Sequence[int]]) -> list[dict[str, int]]:
    names = list(dims)
    combos = itertools.islice(itertools.product(*(dims[n] for n in names)), MAX_SHAPES)
    return [dict(zip(names, combo)) for combo in combos] or [{}]


# -- counting work ---------------------------------------------------------------------------------------------

def _reference_arguments(op: Any, dims: Mapping[str, int], dtype: str, device: str) -> list[Any]:
    import torch

    from opgate.verify.spec import Scalar

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


def analyze_operator(op: Any, gpus: Sequence[GpuModel],
                     measured: Mapping[tuple[str, str, tuple[tuple[str, int], ...]], float] | None = None,
                     ) -> RooflineAnalysis:
    """Roofline points of every (GPU, dtype, shape) of `op`; `measured` adds achieved fractions."""
    points: list[RooflinePoint] = []
    skipped: list[str] = []
    notes: list[str] = []
    for dtype in op.dtypes:
        if dtype not in ITEMSIZE:
            skipped.append(f"{dtype}: no element size known")
            continue
        # The production-like size when the spec gives one (perf_dims); else every declared combination.
        cases = [op.timing_dims()] if getattr(op, "perf_dims", None) else dims_cases(op.dims)
        works = [operator_work(op, dtype, dims) for dims in cases]
        for source in sorted({w.flops_source for w in works} | {w.bytes_source for w in works}):
            note = f"{dtype}: {source}"
            if note not in notes:
                notes.append(note)
        for gpu in gpus:
            if peak_for(gpu, dtype) is None:
                skipped.append(f"{gpu.key} {dtype}: the catalogue lists no {'/'.join(DTYPE_PRECISIONS.get(dtype, (dtype,)))} "
                               "peak for this GPU")
                continue
            for work in works:
                seconds = (measured or {}).get(measurement_key(gpu.key, dtype, work.dims))
                point = roofline_point(work, gpu, seconds)
                assert point is not None
                points.append(point)
    return RooflineAnalysis(op.name, tuple(points), tuple(skipped), tuple(notes))


# -- chart ------------------------------------------------------------------------------------------------------

DTYPE_MARKERS = {"float64": "D", "float32": "o", "float16": "s", "bfloat16": "^", "float8_e4m3fn": "v",
                 "float8_e5m2": "<", "int8": "P", "uint8": "X"}


def write_chart(analysis: RooflineAnalysis, out_dir: Path) -> tuple[Path, Path]:
    """Roofline chart of one operator (PNG and SVG): GPU ceilings per precision used, one point per case."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.hashsalt"] = "opgate"  # stable SVG ids, so reruns write identical files
    out_dir.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(9, 6), dpi=110)
    gpus: dict[str, tuple[str, float]] = {}
    ceilings: dict[tuple[str, str], float] = {}
    for point in analysis.points:
        gpus[point.gpu] = (point.gpu_name, point.bandwidth_bytes_per_s)
        ceilings[(point.gpu, point.precision)] = point.peak_ops_per_s
    intensities = [p.work.intensity for p in analysis.points if 0 < p.work.intensity < float("inf")]
    low = min([0.01, *(i / 4 for i in intensities)])
    high = max([1e4, *(i * 4 for i in intensities)])
    colors = plt.get_cmap("tab10")
    styles = ["-", "--", ":", "-."]
    precisions = sorted({precision for _, precision in ceilings})
    for index, (key, (name, bandwidth)) in enumerate(sorted(gpus.items())):
        color = colors(index % 10)
        for precision in precisions:
            peak = ceilings.get((key, precision))
            if peak is None:
                continue
            ridge = peak / bandwidth
            xs = [low, ridge, high]
            ys = [low * bandwidth, peak, peak]
            axes.plot(xs, ys, styles[precisions.index(precision) % 4], color=color, linewidth=1.2,
                      label=f"{key} {precision}")
        for point in (p for p in analysis.points if p.gpu == key):
            if point.work.flops <= 0:
                continue
            performance = (point.work.flops / point.measured_s) if point.measured_s else point.attainable_ops_per_s
            axes.plot([point.work.intensity], [performance], DTYPE_MARKERS.get(point.work.dtype, "o"), color=color,
                      markersize=6, markerfacecolor="none" if point.measured_s is None else color)
    for dtype, marker in DTYPE_MARKERS.items():
        if any(p.work.dtype == dtype and p.work.flops > 0 for p in analysis.points):
            axes.plot([], [], marker, color="black", markerfacecolor="none", linestyle="none", label=f"{dtype} case")
    if analysis.points and all(p.work.flops <= 0 for p in analysis.points):
        axes.text(0.02, 0.02, "no FLOPs counted: the floor is the memory time (bytes / bandwidth)",
                  transform=axes.transAxes, fontsize=9)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (FLOP / byte of DRAM traffic)")
    axes.set_ylabel("performance (FLOP/s)")
    axes.set_title(f"Roofline: {analysis.operator} (hollow = floor, filled = measured)")
    axes.grid(True, which="both", linewidth=0.3)
    axes.legend(fontsize=7, ncol=2, loc="upper left")
    figure.tight_layout()
    png = out_dir / f"roofline_{analysis.operator}.png"
    svg = out_dir / f"roofline_{analysis.operator}.svg"
    figure.savefig(png, metadata={"Software": None})
    figure.savefig(svg, metadata={"Date": None})
    plt.close(figure)
    return png, svg


def _full_dims(op: Any, dims: Mapping[str, int]) -> dict[str, int]:
    """`dims` with the spec's derived dims (Operator.derived_dims) filled in."""
    with_derived = getattr(op, "with_derived", None)
    return with_derived({k: v for k, v in dims.items() if k not in getattr(op, "derived_dims", {})}) \
        if with_derived else dict(dims)
