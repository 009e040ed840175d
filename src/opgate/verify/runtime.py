"""`opgate verify` on a GPU: how each implementation behaves at run time, beside whether it is right.

- `VerifyRuntimeCheck`: CUDA-event timing (warm-up, L2 flushed, rotating inputs; median and p95) at the
  operator's `perf_dims` (else its largest declared sizes), the achieved fraction of the roofline floor (this
  card's measured HBM bandwidth when the doctor has cached it, else the datasheet), and CUDA graph
  capturability: captured and replayed against eager, or the reason it cannot be, in the user's terms.
- `VerifySanitizerCheck`: the implementation run once under one compute-sanitizer tool (memcheck, racecheck,
  initcheck or synccheck) in its own process; findings (kind, kernel, thread, block) become the result.
- `VerifyNcuCheck`: Nsight Compute counters of the warm call at `perf_dims` beside opgate's byte and
  occupancy models.

All need a CUDA device and skip with the reason elsewhere; all are children of the isolated runner.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from opgate.checks.base import Check, CheckContext
from opgate.errors import SkipCheck
from opgate.results import CheckResult, Figure, Outcome, Threshold

RUNTIME_BACKENDS = ("torch", "triton")
SANITIZER_TIMEOUT_S = 420.0


def cuda_inputs(op: Any, dims: dict[str, int], dtype: str, seed: int) -> list[Any]:
    from opgate.verify.inputs import Case, make_inputs

    values = make_inputs(op, Case.make(dims, seed), dtype).values
    return [v.cuda() if hasattr(v, "cuda") else v for v in values]


def load_implementation(options: dict[str, Any]) -> tuple[Any, Any]:
    """(operator, implementation) named by a GPU-stage task's options (spec_file, op, impl)."""
    from opgate.verify.spec import load_spec_file

    ops = {op.name: op for op in load_spec_file(options["spec_file"])}
    op = ops[options["op"]]
    return op, op.implementations[options["impl"]]


def _require_cuda() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise SkipCheck(f"runtime checks need torch: {exc}") from None
    if not torch.cuda.is_available():
        raise SkipCheck("runtime checks need a CUDA GPU; none is visible to torch")
    return torch


def roofline_fraction(op: Any, dtype: str, dims: dict[str, int], median_s: float,
                      gpu_name: str) -> tuple[list[Figure], str]:
    """Floor time for this case on this GPU and the achieved fraction; figures and a short text."""
    from opgate.analyze.roofline import operator_work, roofline_point
    from opgate.errors import InputError
    from opgate.gpu.ceilings import load_ceilings
    from opgate.gpus import lookup_gpu

    try:
        gpu = lookup_gpu(gpu_name)
    except InputError:
        return [Figure("roofline", f"not judged: {gpu_name!r} is not in opgate's GPU catalogue")], ""
    work = operator_work(op, dtype, dims)
    point = roofline_point(work, gpu, median_s)
    if point is None:
        return [Figure("roofline", f"not judged: no {dtype} peak for {gpu.name} in the catalogue")], ""
    measured = load_ceilings(gpu_name)
    bandwidth, bandwidth_source = point.bandwidth_bytes_per_s, f"{gpu.name} datasheet"
    if measured is not None:
        bandwidth = measured.hbm_read_bytes_per_s
        bandwidth_source = f"HBM read measured on this card by {measured.source}"
    floor_s = max(work.flops / point.peak_ops_per_s, work.bytes / bandwidth)
    fraction = floor_s / median_s if median_s > 0 else math.nan
    bound = "compute" if work.flops / point.peak_ops_per_s > work.bytes / bandwidth else "memory"
    figures = [
        Figure("roofline floor", round(floor_s * 1e6, 3), "us",
               Threshold(f"{bandwidth / 1e12:.3f} TB/s, {point.peak_ops_per_s / 1e12:.0f} TFLOP/s", "ceilings",
                         f"{bandwidth_source}; {point.precision} peak from the GPU catalogue")),
        Figure("achieved fraction of the roofline floor", round(fraction, 3)),
        Figure("bound", bound),
        Figure("arithmetic intensity", round(work.intensity, 3) if work.bytes else None, "FLOP/byte"),
        Figure("work counted", f"{work.flops:.4g} FLOP ({work.flops_source}), {work.bytes:.4g} B ({work.bytes_source})"),
    ]
    return figures, f"{fraction:.0%} of the {bound}-bound roofline floor ({floor_s * 1e6:.1f} us)"


def rotating_input_sets(first: tuple[Any, ...], count: int) -> list[tuple[Any, ...]]:
    """`first`, then count-1 copies in new buffers with every tensor rolled by k along its last dim longer
    than 1. Timing rotates through them (no call finds its inputs where the previous one left them) and the
    graph check replays on values unlike the captured ones. A roll keeps each tensor a valid input of its kind
    (same values; rows keep their sums; indices stay in range) and costs one device copy, where generating a
    fresh set on the host takes seconds at production sizes."""
    sets = [first]
    for k in range(1, count):
        rolled = []
        for value in first:
            dims = [d for d in range(getattr(value, "ndim", 0)) if value.shape[d] > 1]
            rolled.append(value.roll(shifts=k, dims=dims[-1]) if dims else
                          (value.clone() if hasattr(value, "clone") else value))
        sets.append(tuple(rolled))
    return sets


class GpuStageCheck(Check):
    """What the GPU stages share: they run under `opgate verify`, take their id from the engine, need CUDA."""

    verbs = ("verify",)
    levels = ("quick", "standard", "thorough")

    def begin(self, ctx: CheckContext) -> tuple[dict[str, Any], Any]:
        """Adopt the engine's check id and title; (options, torch), or SkipCheck without a CUDA GPU."""
        options = dict(ctx.options)
        self.check_id, self.title = options["check_id"], options.get("title", options["check_id"])
        return options, _require_cuda()


def run_once_command(options: dict[str, Any], profiled: bool = False) -> list[str]:
    """The child process the sanitizer and Nsight Compute watch: one call of the implementation (run_once).
    `profiled`: a warm-up call first, then the measured call alone inside cudaProfilerStart/Stop."""
    return [sys.executable, "-m", "opgate.verify.runtime", options["spec_file"], options["op"], options["impl"],
            options["dtype"], *(["--profiled"] if profiled else [])]


class VerifyRuntimeCheck(GpuStageCheck):
    """Timing, roofline fraction and CUDA-graph capturability of one implementation in one dtype."""

    check_id = "verify.runtime"
    title = "runtime behaviour on the GPU"
    timeout_s = 300.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.measure.graph_capture import check_graph_capture
        from opgate.measure.timing import time_cuda

        options, torch = self.begin(ctx)
        op, implementation = load_implementation(options)
        dtype = options["dtype"]
        dims = op.timing_dims()
        seed = int(options.get("seed", 0))
        fn = implementation.fn
        label = ",".join(f"{k}={v}" for k, v in dims.items())
        try:
            input_sets = rotating_input_sets(tuple(cuda_inputs(op, dims, dtype, seed)), count=3)
            gpu_name = torch.cuda.get_device_name()
            stats = time_cuda(fn, input_sets, warmup=5, repeats=int(options.get("repeats", 50)))
        except torch.cuda.OutOfMemoryError:
            # The timing size does not fit this GPU: a fact about the size and the card, not a defect.
            free, total = torch.cuda.mem_get_info()
            raise SkipCheck(f"{label} {dtype} does not fit this GPU's memory (out of memory with 3 input sets; "
                            f"{free / 2**30:.1f} of {total / 2**30:.1f} GiB free now): declare smaller perf_dims "
                            "or time on a larger GPU") from None
        figures = [
            Figure("timed case", f"{label} {dtype}"),
            Figure("median time", round(stats.median_us, 3), "us"),
            Figure("p95 time", round(stats.p95_us, 3), "us"),
            Figure("timing method", f"CUDA events, {stats.samples} calls after warm-up, L2 flushed before each, "
                                    f"{stats.input_sets} rotating input sets (rolled copies of one)"),
        ]
        roof_figures, roof_text = roofline_fraction(op, dtype, dims, stats.median_us * 1e-6, gpu_name)
        figures += roof_figures
        # Graph capture last: a failed capture leaves torch's CUDA generator unusable in this process.
        graph = check_graph_capture(fn, input_sets[0], input_sets[1])
        extra: dict[str, Any] = {"op": op.name, "implementation": implementation.name, "dtype": dtype,
                                 "dims": dims, "gpu": gpu_name, "timing": stats.to_dict(),
                                 "graph": {**graph.__dict__, "saved_us_per_call": graph.saved_us_per_call}}
        timing_text = f"{stats.median_us:.1f} us median (p95 {stats.p95_us:.1f}) at {label} on {gpu_name}"
        if roof_text:
            timing_text += f", {roof_text}"
        if not graph.captured:
            figures.append(Figure("CUDA graph capture", f"fails: {graph.cause}"))
            return self.warned(f"{timing_text}; not capturable in a CUDA graph: {graph.cause}",
                               figures=figures, remediation=graph.remedy, extra=extra)
        figures += [
            Figure("CUDA graph replay matches eager", graph.matches_eager, threshold=Threshold(True, "==",
                   "a replay runs the same kernels on the same inputs")),
            Figure("eager per call", round(graph.eager_us_per_call or 0, 3), "us"),
            Figure("graph replay per call", round(graph.graph_us_per_call or 0, 3), "us"),
            Figure("launch overhead saved by a graph", round(graph.saved_us_per_call or 0, 3), "us/call"),
        ]
        if not graph.matches_eager:
            return self.failed(f"{timing_text}; CUDA graph replay differs from eager (max |diff| "
                               f"{graph.max_abs_diff:.3g}): the implementation depends on state a graph freezes",
                               figures=figures, remediation="Look for host-side values baked in at capture time "
                               "(Python scalars from tensors, cached pointers, allocator-dependent buffers).",
                               extra=extra)
        saved = graph.saved_us_per_call or 0.0
        # A replay can measure slower than eager (seen on the H200 for the torch attention example at
        # 4.3 ms per call): say so plainly instead of printing a negative saving.
        effect = f"saves {saved:.1f} us per call" if saved >= 0 else f"saves nothing ({-saved:.1f} us slower per call)"
        return self.passed(f"{timing_text}; captures in a CUDA graph, replay matches eager and {effect}",
                           figures=figures, extra=extra)


# Extra compute-sanitizer options per tool (passed when the installed sanitizer knows them): racecheck's
# analysis report names the hazard instead of printing every racing access pair.
SANITIZER_TOOL_OPTIONS = {"racecheck": (("--racecheck-report", "analysis"),)}
SANITIZER_REMEDIES = {
    "memcheck": "Fix the out-of-bounds or invalid access (a missing tail mask, a wrong stride or size).",
    "racecheck": "Add the missing barrier between the shared-memory writes and reads (__syncthreads, "
                 "tl.debug_barrier), or make the threads' shared-memory accesses disjoint.",
    "initcheck": "Write every element before it is read: torch.empty and cudaMalloc memory is uninitialized.",
    "synccheck": "Let every thread of the block reach each barrier: no __syncthreads inside divergent code.",
}


class VerifySanitizerCheck(GpuStageCheck):
    """One call of the implementation under one compute-sanitizer tool (memcheck by default), in its own
    process."""

    check_id = "verify.sanitizer"
    title = "memory safety under compute-sanitizer"
    timeout_s = SANITIZER_TIMEOUT_S + 30

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.sanitizer import (SanitizerNotFound, find_compute_sanitizer, run_under_sanitizer,
                                          supported_tool_options)

        options, _ = self.begin(ctx)
        tool = options.get("tool", "memcheck")
        try:
            path = find_compute_sanitizer()
            tool_options, _ = supported_tool_options(path, SANITIZER_TOOL_OPTIONS.get(tool, ()))
            run = run_under_sanitizer(run_once_command(options), tool=tool, tool_options=tool_options,
                                      timeout_s=SANITIZER_TIMEOUT_S, sanitizer=path)
        except SanitizerNotFound as exc:
            raise SkipCheck(str(exc)) from None
        findings = run.report.findings
        extra = {"sanitizer": run.to_dict()}
        figures = [Figure("tool", tool), Figure("findings", len(findings), "", Threshold(0, "==", "compute-sanitizer")),
                   Figure("run time under the sanitizer", round(run.duration_s, 1), "s")]
        if run.timed_out:
            return self.result(Outcome.ERROR, f"{tool} run timed out after {SANITIZER_TIMEOUT_S:g} s",
                               figures=figures, extra=extra)
        if findings or run.sanitizer_flagged:
            first = findings[0] if findings else None
            where = ""
            if first is not None:
                where = f": {first.kind} in {first.kernel or '?'}"
                if first.thread is not None:
                    where += f" thread {tuple(first.thread)} block {tuple(first.block or ())}"
            return self.failed(f"{tool} reports {len(findings) or run.report.reported_error_count} error(s){where}",
                               figures=figures, remediation=SANITIZER_REMEDIES.get(tool, "") + " The log path "
                               "is in the JSON report.", extra=extra)
        if run.returncode not in (0, None):
            return self.result(Outcome.ERROR, f"the implementation exited with {run.returncode} under {tool}: "
                               f"{run.stderr_tail.strip().splitlines()[-1] if run.stderr_tail.strip() else ''}",
                               figures=figures, extra=extra)
        return self.passed(f"{tool}: no errors in one call at the first declared sizes ({run.duration_s:.0f} s "
                           "under the sanitizer)", figures=figures, extra=extra)


class VerifyNcuCheck(GpuStageCheck):
    """Nsight Compute counters of the implementation's kernels beside opgate's static byte model."""

    check_id = "verify.ncu"
    title = "Nsight Compute counters"
    timeout_s = 360.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.analyze.roofline import operator_work
        from opgate.gpu.ncu import NcuNotFound, run_ncu

        options, _ = self.begin(ctx)
        op, _ = load_implementation(options)
        try:
            kernels, stderr = run_ncu(run_once_command(options, profiled=True), timeout_s=self.timeout_s - 30)
        except NcuNotFound as exc:
            raise SkipCheck(str(exc)) from None
        if not kernels:
            raise SkipCheck(f"ncu read no counters (profiling may be unavailable here): {stderr.strip()[-300:]}")
        model = operator_work(op, options["dtype"], op.timing_dims())
        dram = sum(k.values.get("dram_bytes", 0.0) for k in kernels)
        figures = [Figure("kernels profiled", len(kernels)),
                   Figure("DRAM bytes (ncu, all kernels)", round(dram), "B",
                          Threshold(round(model.bytes), "model", f"opgate's static model: {model.bytes_source}")),
                   Figure("DRAM bytes / model", round(dram / model.bytes, 3) if model.bytes else None)]
        modelled_occupancy = {k.launch_id: model_occupancy_pct(k) for k in kernels}
        for k in kernels[:8]:
            v = k.values
            ours = modelled_occupancy[k.launch_id]
            figures.append(Figure(f"{k.kernel[:60]} (block {k.block}, grid {k.grid})",
                                  f"achieved occupancy {v.get('achieved_occupancy_pct', float('nan')):.1f}% of "
                                  f"theoretical {v.get('theoretical_occupancy_pct', float('nan')):.1f}%"
                                  + (f" (opgate's occupancy model: {ours:.1f}%)" if ours is not None else "")
                                  + f", L2 hit {v.get('l2_hit_rate_pct', float('nan')):.1f}%, "
                                  f"DRAM {v.get('dram_bytes', 0):.0f} B, {v.get('duration_ns', 0) / 1e3:.1f} us"))
            if any(name.startswith("smsp__average_warps_issue_stalled") for name in v):  # `opgate explain`'s diagnosis
                from opgate.gpu.limiter import diagnose
                from opgate.gpu.ncu import limiter_profile

                figures.append(Figure(f"{k.kernel[:60]}: limiter", diagnose(limiter_profile(k)).line))
        extra = {"kernels": [k.__dict__ for k in kernels], "model_bytes": model.bytes, "stderr_tail": stderr,
                 "model_occupancy_pct": modelled_occupancy}
        reason = (f"{len(kernels)} kernel launch(es) profiled with --clock-control none: DRAM "
                  f"{dram / 1e6:.3f} MB vs {model.bytes / 1e6:.3f} MB modelled")
        l2_bytes = _l2_bytes()
        if l2_bytes and model.bytes and model.bytes < l2_bytes:
            # ncu flushes the caches before the kernel, so reads come from DRAM; written lines can stay in
            # the write-back L2 when the kernel ends and never show up as DRAM traffic.
            figures.append(Figure("modelled bytes vs L2 size", f"{model.bytes / 1e6:.3f} MB < {l2_bytes / 1e6:.1f} MB"))
            reason += (f"; the working set fits in the {l2_bytes / 1e6:.0f} MB L2, so written bytes may stay there "
                       "and DRAM counts fall below the model (profile larger sizes to compare)")
        return self.passed(reason, figures=figures, extra=extra)


def model_occupancy_pct(kernel: Any) -> float | None:
    """opgate's occupancy model (analyze.occupancy, checked against the driver) for one profiled launch, from
    the block size, registers and shared memory ncu reported; None when ncu did not report them."""
    from opgate.analyze.limits import sm_limits
    from opgate.analyze.occupancy import KernelLaunch, calculate
    from opgate.errors import InputError

    v = kernel.values
    if "block_size" not in v or "registers_per_thread" not in v or not kernel.cc:
        return None
    try:
        launch = KernelLaunch(threads_per_block=int(v["block_size"]), registers_per_thread=int(v["registers_per_thread"]),
                              static_shared_bytes=int(v.get("static_shared_bytes", 0)),
                              dynamic_shared_bytes=int(v.get("dynamic_shared_bytes", 0)))
        return 100.0 * calculate(launch, sm_limits(kernel.cc)).occupancy
    except (InputError, ValueError):
        return None


def _l2_bytes() -> int:
    """L2 size of the current CUDA device as torch reports it (0 when it cannot tell)."""
    try:
        import torch

        return int(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0))
    except Exception:
        return 0


def run_once(spec_file: str, op_name: str, impl_name: str, dtype: str, profiled: bool = False) -> None:
    """What the sanitizer watches: one call at the first declared sizes, then a device sync.

    With `profiled` (Nsight Compute), the call runs at the operator's timing size, and a first call compiles (and autotunes) the kernels, and only the second runs between
    cudaProfilerStart and cudaProfilerStop: Nsight Compute, started with --profile-from-start off, then sees
    the implementation's own launches, not input generation, JIT compilation or autotuning."""
    import torch

    op, implementation = load_implementation({"spec_file": spec_file, "op": op_name, "impl": impl_name})
    args = cuda_inputs(op, op.timing_dims() if profiled else op.default_dims(), dtype, seed=0)
    if profiled:
        implementation.fn(*args)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
    implementation.fn(*args)
    torch.cuda.synchronize()
    if profiled:
        torch.cuda.profiler.stop()


if __name__ == "__main__":
    run_once(*sys.argv[1:5], profiled="--profiled" in sys.argv[5:])
