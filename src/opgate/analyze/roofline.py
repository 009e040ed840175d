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

from opgate.core.dtypes import ITEMSIZE
from opgate.core.work import (  # noqa: F401  (the work model: core)
    DTYPE_PRECISIONS, OperatorWork, RooflinePoint, operator_work, peak_for, roofline_point,
)
from opgate.core.gpus import GpuModel

MAX_SHAPES = 64  # dims combinations per dtype beyond this are dropped, in declaration order



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
