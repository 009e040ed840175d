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

import functools
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from opgate.checks.base import Check, CheckContext
from opgate.engine import gpu_pause
from opgate.model.errors import SkipCheck
from opgate.gpu.judge.graphs import ROUNDING_ORDER
from opgate.model.results import RETIRE_WORKER, CheckResult, Figure, Outcome, Threshold, slug
from opgate.verify.phase_clock import PhaseClock
from opgate.verify.tasks import GpuStagePayload, ImplementationRef

if TYPE_CHECKING:
    from opgate.gpu.judge.graphs import GraphMismatchCause
    from opgate.gpu.probes.graphs import GraphCaptureReport
    from opgate.gpu.probes.timing import TimedCalls

SANITIZER_TIMEOUT_S = 420.0


def cuda_inputs(op: Any, dims: dict[str, int], dtype: str, seed: int, draw_on_gpu: bool = True) -> list[Any]:
    """Inputs of `dims` on the GPU. Drawn there by default (verify/inputs.py inputs_on): the kind's
    distribution, not the plan's exact values, which timing and recovery do not need. Under compute-sanitizer
    they are drawn on the host, so the only kernels the tools watch are the implementation's."""
    from opgate.verify.inputs import Case, inputs_on, make_inputs

    with inputs_on("cuda" if draw_on_gpu else "cpu"):
        values = make_inputs(op, Case.make(dims, seed), dtype).values
    return [v.cuda() if hasattr(v, "cuda") else v for v in values]


def load_implementation(ref: Any) -> tuple[Any, Any]:
    """(operator, implementation) a GPU-stage payload (or ImplementationRef) names: spec_file, op, impl."""
    from opgate.verify.loaded_specs import loaded_operators

    ops = {op.name: op for op in loaded_operators(ref.spec_file)}
    op = ops[ref.op]
    return op, op.implementations[ref.impl]


def _require_cuda() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise SkipCheck(f"runtime checks need torch: {exc}") from None
    if not torch.cuda.is_available():
        raise SkipCheck("runtime checks need a CUDA GPU; none is visible to torch")
    return torch


def roofline_fraction(op: Any, dtype: str, dims: dict[str, int], median_s: float,
                      gpu_name: str, work_count_path: str = "") -> tuple[list[Figure], str]:
    """Floor time for this case on this GPU and the achieved fraction; figures and a short text. `work_count_path`:
    where the runtime warm-up left the operator's work count (core/work.py operator_work_stored)."""
    from opgate.core.work import operator_work_stored, roofline_point
    from opgate.model.errors import InputError
    from opgate.gpu.judge.ceilings import load_ceilings
    from opgate.core.gpus import lookup_gpu

    try:
        gpu = lookup_gpu(gpu_name)
    except InputError:
        return [Figure("roofline", f"not judged: {gpu_name!r} is not in opgate's GPU catalogue",
                       key="verify.runtime.roofline")], ""
    work = operator_work_stored(op, dtype, dims, work_count_path)
    point = roofline_point(work, gpu, median_s)
    if point is None:
        return [Figure("roofline", f"not judged: no {dtype} peak for {gpu.name} in the catalogue",
                       key="verify.runtime.roofline")], ""
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
                         f"{bandwidth_source}; {point.precision} peak from the GPU catalogue"),
               key="verify.runtime.roofline_floor"),
        Figure("achieved fraction of the roofline floor", round(fraction, 3),
               key="verify.runtime.achieved_fraction_of_the_roofline_floor"),
        Figure("bound", bound, key="verify.runtime.bound"),
        Figure("arithmetic intensity", round(work.intensity, 3) if work.bytes else None, "FLOP/byte",
               key="verify.runtime.arithmetic_intensity"),
        Figure("work counted", f"{work.flops:.4g} FLOP ({work.flops_source}), {work.bytes:.4g} B ({work.bytes_source})",
               key="verify.runtime.work_counted"),
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


def _json_number(value: Any) -> Any:
    """JSON has no inf/NaN (a spread is inf where NaN positions differ): keep them readable, as figures do."""
    return repr(value) if isinstance(value, float) and not math.isfinite(value) else value


# Spread between calls that is the rounding of a float sum in another order, relative to the largest |output|: at
# least 1e-4 (a float32 sum of thousands of terms reordered moves ~1e-6 of its largest value; a race or a lost
# update moves O(1)), or 8 units of the output dtype's eps (an fp16/bf16 output rounded after an fp32 atomic sum).
ROUNDING_SPREAD_FLOOR = 1e-4
ROUNDING_SPREAD_EPS = 8.0


def graph_mismatch(graph: GraphCaptureReport, dtype: str = "float32") -> GraphMismatchCause:
    """The measured cause of a replay that differs from eager (opgate.gpu.judge.graphs), from the probe's report."""
    from opgate.core import dtypes as dt
    from opgate.gpu.judge.graphs import GraphMismatchFacts, graph_mismatch_cause
    from opgate.gpu.probes.graphs import MATCH_RTOL

    tolerance = float(graph.tolerance or 0.0)
    scale = tolerance / MATCH_RTOL  # the probe's tolerance is MATCH_RTOL x the largest |output|
    relative = max(ROUNDING_SPREAD_FLOOR, ROUNDING_SPREAD_EPS * dt.eps(dtype)) if dt.is_float(dtype) else 0.0
    facts = GraphMismatchFacts(replay_diff=float(graph.max_abs_diff or 0.0), tolerance=tolerance,
                               eager_calls=graph.eager_calls, eager_spread=graph.eager_spread, replays=graph.replays,
                               replay_spread=graph.replay_spread, unwritten=graph.unwritten, elements=graph.elements,
                               eager_reuses_outputs=graph.eager_reuses_outputs, rounding=relative * scale)
    return graph_mismatch_cause(facts)


class GpuStageCheck(Check):
    """What the GPU stages share: they run under `opgate verify`, take their id from the engine, need CUDA."""

    verbs = ("verify",)
    levels = ("quick", "standard", "thorough")

    def begin(self, ctx: CheckContext) -> tuple[GpuStagePayload, Any]:
        """(the task's payload, torch), or SkipCheck without a CUDA GPU. The runner names the result."""
        return GpuStagePayload.from_dict(ctx.options), _require_cuda()

    def result(self, outcome: Outcome, reason: str, figures: Sequence[Figure] = (), remediation: str = "",
               extra: Mapping[str, Any] | None = None, labels: Mapping[str, str] | None = None) -> CheckResult:
        """A stage's result labelled with the dtype and the sizes its evidence names: what this check ran, which
        its task's labels do not say for a stage planned per implementation (the sanitizer's)."""
        evidence = extra or {}
        own = {"dtype": str(evidence["dtype"])} if evidence.get("dtype") else {}
        dims = evidence.get("dims")
        if isinstance(dims, Mapping) and dims:
            own["dims"] = ",".join(f"{k}={v}" for k, v in dims.items())
        return super().result(outcome, reason, figures, remediation, extra, {**own, **(labels or {})})


def run_once_command(options: GpuStagePayload, profiled: bool = False, sanitized: bool = False) -> list[str]:
    """The child process the sanitizer and Nsight Compute watch: one call of the implementation (run_once).
    `profiled`: a warm-up call first, then the measured call alone inside cudaProfilerStart/Stop.
    `sanitized`: allocator caches off, one call at the first declared sizes, then one at a tail size."""
    return [sys.executable, "-m", "opgate.verify.runtime", options.spec_file, options.op, options.impl,
            options.dtype, *(["--profiled"] if profiled else []), *(["--sanitized"] if sanitized else [])]


INTERNAL = "internal"  # a result's extra key: the engine leaves such results out of the report
# (spec file, operator, implementation, dtype) this process warmed up: the runtime check says whether it runs in the
# worker of its own warm-up (extra["warmed_here"]), which decides what its first call costs
_WARMED_UP_HERE: set[tuple[str, str, str, str]] = set()


COMPILED = "compiled"  # a warm-up's call returned: its kernels are compiled at the timing size


def _warm_up_key(options: GpuStagePayload) -> tuple[str, str, str, str]:
    return (options.spec_file, options.op, options.impl, options.dtype)


class VerifyRuntimeWarmUpCheck(GpuStageCheck):
    """One call of the implementation at its timing size, side by side with other work, before its exclusive
    runtime check: the Triton JIT compiles and autotuning at that size (seconds to a minute per kernel family on a
    cold machine) then happen while other checks run, not while the GPU is held alone for timing. Its result is
    internal (not reported): the runtime check judges, and says so itself if the call fails."""

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.verify.backends.triton_backend import record_compiles
        from opgate.verify.gradients import upstream_kept_on_device
        from opgate.verify.resume import compiles_marked, warm_up_folder

        started = time.perf_counter()
        options, torch = self.begin(ctx)
        jit = record_compiles()  # its compiles are quiet for a measurement window (engine/gpu_pause.py)
        clock = PhaseClock()
        # marked on disk while one runs: killed at its timeout, it is reported with the kernel it was compiling
        with compiles_marked(warm_up_folder(ctx.options)), runtime_autotuning() as within_limit:
            op, note, retried = self._first_call(options, torch, upstream_kept_on_device, clock)
        _WARMED_UP_HERE.add(_warm_up_key(options))
        if op is not None and options.work_count_path:  # counted here, not in the measurement that holds the GPU
            from opgate.core.work import operator_work_stored

            clock.restart()
            try:
                operator_work_stored(op, options.dtype, op.timing_dims(), options.work_count_path)
            except Exception:  # the runtime check counts it again and reports what stops it
                pass
            clock.lap("work_count")
        return self.passed(f"warm-up at the timing size: {note}",
                           extra={INTERNAL: True, "seconds": round(time.perf_counter() - started, 3),
                                  "phase_s": clock.laps, "compiles": int(jit.get("compiles", 0)),
                                  "compile_s": float(jit.get("seconds", 0.0)), "autotune": jit.get("autotune"),
                                  **({} if note == COMPILED else {"raised": note}),
                                  **({"out_of_memory_retried": retried} if retried else {}),
                                  **({"autotune_within_limit": within_limit} if within_limit else {})})

    @staticmethod
    def _first_call(options: GpuStagePayload, torch: Any, upstream_kept_on_device: Any,
                    clock: PhaseClock) -> tuple[Any, str, list[str]]:
        """(the operator or None, what happened, what the tries that ran out of memory raised): the implementation
        called once at its timing size; `clock` gets the seconds of its steps (load, inputs, call: the call holds
        the compiles and the autotuning; room: waiting for GPU memory after an out-of-memory error)."""
        from opgate.gpu.judge.oom import exception_is_out_of_memory

        clock.restart()
        try:
            op, implementation = load_implementation(options)
        except Exception as exc:  # the runtime check meets it again and reports it in its own words
            return None, _raised(exc), []
        clock.lap("load")
        retried: list[str] = []
        while True:
            try:
                gpu_pause.pause_point()
                inputs = cuda_inputs(op, op.timing_dims(), options.dtype, options.seed)
                clock.lap("inputs")
                gpu_pause.pause_point()
                with upstream_kept_on_device():  # as the runtime check will call it
                    implementation.fn(*inputs)
                torch.cuda.synchronize()
                clock.lap("call")
                return op, COMPILED, retried
            except Exception as exc:
                note = _raised(exc)
                out_of_memory = exception_is_out_of_memory(exc)
            inputs = None  # noqa: F841  (their memory goes back before the wait)
            if not out_of_memory or len(retried) + 1 >= WARM_UP_TRIES:
                return op, note, retried
            retried.append(note)
            _wait_for_warm_up_room(torch, note)
            clock.lap("room")


def runtime_autotuning() -> Any:
    """The scope the runtime stage's warm-ups and timings call the implementation in: Triton's autotuning over the
    configs within the per-thread limit (verify/backends/autotune_choice.py; it yields that scope's summary), or over
    every config where OPGATE_RUNTIME_AUTOTUNE=all asks (it yields None)."""
    import contextlib

    from opgate.verify.backends import autotune_choice

    if autotune_choice.within_limit_wanted():
        return autotune_choice.configs_within_limit()
    return contextlib.nullcontext(None)


def with_autotuning(result: CheckResult, within_limit: Mapping[str, Any] | None) -> CheckResult:
    """The runtime result, where its config was chosen within the per-thread limit (`within_limit`, the scope's
    summary; None: Triton's own autotuning), with that said and what its own autotuning benchmarked and left out, per
    kernel (empty where its warm-up or Triton's disk cache had chosen)."""
    if within_limit is None:
        return result
    import dataclasses

    from opgate.verify.backends.autotune_choice import RUNTIME_SCOPE

    return dataclasses.replace(result, extra={**(result.extra or {}), "autotune_within_limit": dict(within_limit),
                                              "autotune_scope": RUNTIME_SCOPE})


def _raised(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


# A warm-up that runs out of GPU memory beside the run's other work tries again once the card has room, up to
# WARM_UP_TRIES calls in all: one that raises warms nothing, and its runtime check then compiles and autotunes while
# it holds the GPU alone. On an H100 library run four warm-ups of FlagGems' cross-entropy and group-norm gradients
# ended within 0.1 s while 5-16 GiB were free (another cross-entropy warm-up held 32 GiB), and their checks' first
# calls took 3-7 s each at the run's serial end (forty-seventh session). With the retry (forty-eighth session) 19
# warm-ups of the large-vocabulary losses ran out of memory (7.8-15.6 GiB asked, 3-13 GiB free): 8 compiled on a later
# try, 11 raised on all three (begun within 75 s of one another, each retry likely met the others); the runtime
# checks' first calls took 8 s in all (32 s the session before), the waits 256 s of slot time beside the numerics.
WARM_UP_TRIES = 3
# The free memory a retry waits for: what the failed try had reserved plus what it asked for, with this margin,
# and never more than this share of the card; nor longer than WARM_UP_ROOM_WAIT_S (then it tries anyway).
WARM_UP_ROOM_MARGIN = 1.25
WARM_UP_ROOM_SHARE = 0.5
WARM_UP_ROOM_WAIT_S = 60.0


def _wait_for_warm_up_room(torch: Any, raised: str) -> None:
    """After an out-of-memory try: this process's cached memory given back, then a wait for the room the try
    needed (above), at a pause point each poll so a measurement window is never held up by the wait."""
    from opgate.gpu.judge.oom import requested_bytes
    from opgate.gpu.probes.device_memory import free_cached_memory, wait_for_free_memory

    peak = int(torch.cuda.max_memory_reserved())
    free_cached_memory(torch)
    _, total = torch.cuda.mem_get_info()
    share = int(total * WARM_UP_ROOM_SHARE)
    asked = requested_bytes(raised)
    wanted = min(share, int((peak + asked) * WARM_UP_ROOM_MARGIN)) if asked else share
    wait_for_free_memory(torch, wanted, WARM_UP_ROOM_WAIT_S, between=gpu_pause.pause_point)


def warm_up_summary(results: Sequence[CheckResult]) -> dict[str, Any]:
    """What the run's runtime warm-ups did, for the report (extra.engine.warm_ups; their own results are
    internal): how many, their seconds by step, their compiles and autotuning, and the longest five. On a library
    they run beside the calibration at their floor of slots and gate every runtime check (builtin_stages.py)."""
    extras = {r.check_id: r.extra for r in results if r.check_id.endswith("_warm_up") and isinstance(r.extra, dict)}
    if not extras:
        return {}

    def total(key: str, within: str = "") -> float:
        parts = [(extra.get(within) if within else extra) or {} for extra in extras.values()]
        return round(sum(float(part.get(key) or 0.0) for part in parts if isinstance(part, dict)), 1)

    longest = sorted(extras, key=lambda check: -float(extras[check].get("seconds") or 0.0))[:5]
    # None, not 0, where no warm-up could count its autotuning (a Triton whose knobs.autotuning has no listener):
    # the H100 hosts' Triton 3.6.0 counted none while fla's activations compiled 30 kernels a warm-up
    counted = any(isinstance(extra.get("autotune"), dict) for extra in extras.values())
    # A warm-up whose call raised warmed nothing: its runtime check compiles while it holds the GPU alone. In a
    # library run on an H100 four of them took under 0.1 s, and their checks' first calls 4-7 s each (forty-seventh
    # session); their results are internal, so the report says what they raised.
    raised = {_warm_up_name(check): str(extra["raised"]) for check, extra in extras.items() if extra.get("raised")}
    # ... and those that ran out of memory beside other work and tried again once the card had room (WARM_UP_TRIES):
    # how many tries ran out of memory, and whether a later one compiled
    retried = {_warm_up_name(check): {"out_of_memory": len(extra["out_of_memory_retried"]),
                                      "then_compiled": not extra.get("raised")}
               for check, extra in extras.items() if extra.get("out_of_memory_retried")}
    # how many keys autotuned over fewer configs than the kernel has, and how many configs were left out at them in
    # all (autotune_choice.configs_within_limit; none with OPGATE_RUNTIME_AUTOTUNE=all)
    limited = [extra["autotune_within_limit"] for extra in extras.values()
               if isinstance(extra.get("autotune_within_limit"), dict)]
    within = {"keys": sum(len(entry.get("benchmarked") or {}) for summary in limited for entry in summary.values()),
              "configs_left_out": sum(sum((entry.get("over_thread_limit") or {}).values())
                                      for summary in limited for entry in summary.values())} if limited else {}
    return {"tasks": len(extras), "seconds": total("seconds"), **({"raised": raised} if raised else {}),
            **({"retried": retried} if retried else {}), **({"within_limit": within} if within else {}),
            "phase_s": {step: total(step, "phase_s") for step in ("load", "inputs", "call", "room", "work_count")},
            "compiles": int(total("compiles")), "compile_s": total("compile_s"),
            "autotune_runs": int(total("runs", "autotune")) if counted else None,
            "autotune_s": total("seconds", "autotune") if counted else None,
            "longest": {_warm_up_name(check):
                        {key: extras[check].get(key) for key in ("seconds", "phase_s", "compiles", "compile_s")}
                        for check in longest}}


def _warm_up_name(check_id: str) -> str:
    return check_id.removeprefix("verify.").removesuffix(".runtime_warm_up")


# A timing whose median is over this many times its fastest call was disturbed while it ran, and is timed once more;
# the one with the lower median is kept (a disturbance only adds time). In the fiftieth session's H100 library run
# fla_swish's float16 timing had a 1,352 us median over 50 calls whose fastest took 327 us, and its graph check's
# eager calls right after took 341 us: the report said 16% of the roofline floor, and `opgate diff` against a clean
# run would have said 4x slower. Of 342 runtime checks in that session's two completions 7 spread over 1.5x, 2 over 2x.
STEADY_SPREAD = 1.5


def steady_timing(time_once: Callable[[], TimedCalls]) -> tuple[TimedCalls, TimedCalls | None]:
    """(the timing kept, the one not kept or None): `time_once()`, and where its median is over
    STEADY_SPREAD times its fastest call, once more, keeping the one with the lower median."""
    first = time_once()
    if first.samples < 3 or first.median_us <= STEADY_SPREAD * first.min_us:
        return first, None
    again = time_once()
    return (again, first) if again.median_us < first.median_us else (first, again)


def timed_twice_note(kept: TimedCalls, other: TimedCalls | None) -> str:
    """What the reason says of a measurement timed twice (steady_timing), empty where it was timed once."""
    if other is None:
        return ""
    spreads = [t.median_us / t.min_us for t in (kept, other) if t.min_us > 0]
    spread = f"to {max(spreads):.1f}x their fastest" if spreads else "beyond their fastest"
    return (f" (timed twice, the calls of a timing spreading {spread}: medians {kept.median_us:.1f} us kept, "
            f"{other.median_us:.1f} us not)")


# Above this share of the card held by other processes, a timing that runs out of memory says nothing about whether
# its size fits the GPU: on the H100 host a library run's idle processes held 76 of 79 GiB and three timings were
# reported as sizes that do not fit (thirty-ninth session; engine/gpu_memory.py).
OTHERS_HOLD_SHARE = 0.25


def host_submit_s(stats: TimedCalls) -> float | None:
    """The host's seconds to submit one timed call, None where the timing did not record it."""
    return None if stats.host_submit_us is None else stats.host_submit_us * 1e-6


def launch_not_timed_because(stats: TimedCalls, not_timed: str) -> str:
    """Why the graph check did not time the launch overhead a graph saves, in words, from the probe's reason
    (GraphCaptureReport.replay_not_timed): the host submits a call in a small share of its GPU time, or the call is
    too slow."""
    from opgate.gpu.probes.graphs import HOST_BOUND

    if not_timed == HOST_BOUND and stats.host_submit_us is not None:
        return (f"the host submits a call in {stats.host_submit_us:.0f} us, "
                f"{stats.host_submit_us / stats.median_us:.1%} of its {stats.median_us:.0f} us on the GPU, so a graph "
                "saves at most about that")
    return f"a call takes {stats.median_us / 1e6:.2g} s, against microseconds of launch overhead"


class VerifyRuntimeCheck(GpuStageCheck):
    """Timing, roofline fraction and CUDA-graph capturability of one implementation in one dtype."""

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.verify.gradients import upstream_kept_on_device

        options, torch = self.begin(ctx)
        # a gradient twin's upstream gradients stay on the GPU across the calls: the timing and the capture see
        # its forward and backward kernels, not opgate drawing and copying an upstream gradient for every call
        with upstream_kept_on_device(), runtime_autotuning() as within_limit:
            result = self._timed(ctx, options, torch)
        return with_autotuning(result, within_limit)

    def _timed(self, ctx: CheckContext, options: GpuStagePayload, torch: Any) -> CheckResult:
        from opgate.gpu.probes.device_memory import held_by_this_process
        from opgate.gpu.probes.graphs import check_graph_capture
        from opgate.gpu.probes.timing import TIMED_CALLS_BUDGET_S, time_cuda

        clock = PhaseClock()  # where a slow runtime check spends its time (extra["phase_s"])

        op, implementation = load_implementation(options)
        dtype = options.dtype
        dims = op.timing_dims()
        seed = options.seed
        fn = implementation.fn
        label = ",".join(f"{k}={v}" for k, v in dims.items())
        clock.lap("load")
        held_before = held_by_this_process(torch)  # an earlier check's leftovers: no demand of this size's
        try:
            input_sets = rotating_input_sets(tuple(cuda_inputs(op, dims, dtype, seed)), count=3)
            torch.cuda.synchronize()
            clock.lap("inputs")
            gpu_name = torch.cuda.get_device_name()
            stats, other = steady_timing(functools.partial(time_cuda, fn, input_sets, warmup=5,
                                                           repeats=options.repeats))
            clock.lap("timing")
        except torch.cuda.OutOfMemoryError:
            unjudged = self._out_of_memory_beside_others(torch, f"{label} {dtype}", held_before)
            if unjudged is not None:
                return unjudged
            free, total = torch.cuda.mem_get_info()
            # The timing size does not fit this GPU: a fact about the size and the card, not a defect.
            raise SkipCheck(f"{label} {dtype} does not fit this GPU's memory (out of memory with 3 input sets; "
                            f"{free / 2**30:.1f} of {total / 2**30:.1f} GiB free now): declare smaller perf_dims "
                            "or time on a larger GPU") from None
        slow_note = (f" (not {options.repeats}: about {TIMED_CALLS_BUDGET_S:g} s of timed calls at "
                     f"{stats.median_us / 1e6:.2g} s a call)" if stats.samples < options.repeats else "")
        figures = [
            Figure("timed case", f"{label} {dtype}", key="verify.runtime.timed_case"),
            Figure("median time", round(stats.median_us, 3), "us", key="verify.runtime.median_time"),
            Figure("p95 time", round(stats.p95_us, 3), "us", key="verify.runtime.p95_time"),
            Figure("timing method", f"CUDA events, {stats.samples} calls after warm-up{slow_note}, L2 flushed "
                                    f"before each, {stats.input_sets} rotating input sets (rolled copies of one)",
                   key="verify.runtime.timing_method"),
        ]
        roof_figures, roof_text = roofline_fraction(op, dtype, dims, stats.median_us * 1e-6, gpu_name,
                                                    options.work_count_path)
        figures += roof_figures
        # Graph capture last: a failed capture leaves torch's CUDA generator unusable in this process.
        clock.lap("roofline")
        timing_text = (f"{stats.median_us:.1f} us median (p95 {stats.p95_us:.1f}) at {label} on {gpu_name}"
                       f"{timed_twice_note(stats, other)}")
        if roof_text:
            timing_text += f", {roof_text}"
        extra: dict[str, Any] = {"op": op.name, "implementation": implementation.name, "dtype": dtype,
                                 "dims": dims, "gpu": gpu_name, "timing": stats.to_dict(), "phase_s": clock.laps,
                                 **({"timing_not_kept": other.to_dict()} if other is not None else {}),
                                 "warmed_here": _warm_up_key(options) in _WARMED_UP_HERE}
        captured_on, replayed_on = input_sets[0], input_sets[1]
        # the capture needs two sets: the third's memory goes to its static copies and outputs (check_graph_capture
        # returns the allocator's cached blocks to the driver before it captures)
        del input_sets
        try:
            graph = check_graph_capture(fn, captured_on, replayed_on, seconds_per_call=stats.median_us * 1e-6,
                                        host_submit_s=host_submit_s(stats))
        except torch.cuda.OutOfMemoryError:
            return self._graph_out_of_memory(torch, f"{label} {dtype}", timing_text, figures, extra, held_before)
        clock.lap("graph")
        extra["graph"] = {**{k: _json_number(v) for k, v in graph.__dict__.items()},
                          "saved_us_per_call": graph.saved_us_per_call}
        if graph.kept_bytes:  # memory only this process's exit gives back: its warm worker ends after this check
            extra[RETIRE_WORKER] = (f"a failed CUDA graph capture keeps {graph.kept_bytes / 2**30:.1f} GiB of GPU "
                                    "memory in this process")
        if not graph.captured:
            figures.append(Figure("CUDA graph capture", f"fails: {graph.cause}",
                                  key="verify.runtime.cuda_graph_capture"))
            return self.warned(f"{timing_text}; not capturable in a CUDA graph: {graph.cause}",
                               figures=figures, remediation=graph.remedy, extra=extra)
        figures += [
            Figure("CUDA graph replay matches eager", graph.matches_eager, threshold=Threshold(True, "==",
                   "a replay runs the same kernels on the same inputs"),
                   key="verify.runtime.cuda_graph_replay_matches_eager"),
        ]
        saved = graph.saved_us_per_call
        call_time = launch_not_timed_because(stats, graph.replay_not_timed)  # where saved is None
        if saved is None:  # a call the host submits in a small share of its GPU time, or too slow to time in budget
            not_timed = f"not timed: {call_time}"
            figures.append(Figure("launch overhead saved by a graph", not_timed,
                                  key="verify.runtime.launch_overhead_saved_by_a_graph"))
        else:
            figures += [
                Figure("eager per call", round(graph.eager_us_per_call or 0, 3), "us",
                       key="verify.runtime.eager_per_call"),
                Figure("graph replay per call", round(graph.graph_us_per_call or 0, 3), "us",
                       key="verify.runtime.graph_replay_per_call"),
                Figure("launch overhead saved by a graph", round(saved, 3), "us/call",
                       key="verify.runtime.launch_overhead_saved_by_a_graph"),
            ]
        if not graph.matches_eager:
            mismatch = graph_mismatch(graph, dtype)
            figures.append(Figure("CUDA graph mismatch cause", mismatch.kind,
                                  key="verify.runtime.cuda_graph_mismatch_cause"))
            extra["graph"]["mismatch_cause"] = mismatch.kind
            if mismatch.kind == ROUNDING_ORDER:  # unordered float atomics: as right as eager, said, not failed
                return self.passed(f"{timing_text}; captures in a CUDA graph; replay and eager differ only as "
                                   f"{mismatch.cause}", figures=figures, extra=extra)
            prefix = ""
            if mismatch.failure_class:
                extra["failure_class"] = mismatch.failure_class
                prefix = f"[{mismatch.failure_class}] "
            return self.failed(f"{prefix}{timing_text}; CUDA graph replay differs from eager (max |diff| "
                               f"{graph.max_abs_diff:.3g}): {mismatch.cause}",
                               figures=figures, remediation=mismatch.remedy, extra=extra)
        # A replay can measure slower than eager (seen on the H200 for the torch attention example at
        # 4.3 ms per call): say so plainly instead of printing a negative saving.
        if saved is None:
            effect = f"its launch overhead was not timed ({call_time})"
        elif saved >= 0:
            effect = f"saves {saved:.1f} us per call"
        else:
            effect = f"saves nothing ({-saved:.1f} us slower per call)"
        return self.passed(f"{timing_text}; captures in a CUDA graph, replay matches eager and {effect}",
                           figures=figures, extra=extra)

    def _out_of_memory_beside_others(self, torch: Any, case: str, held_before: int = 0) -> CheckResult | None:
        """The error result when running out of memory at `case` says nothing about whether it fits this GPU alone
        (inside a measurement window, or while other processes, with what this process held before the check
        began, `held_before` bytes, held more than OTHERS_HOLD_SHARE of it); None when the check's own demand held
        the memory, so the size does not fit. A false "does not fit" otherwise: fla's cross-entropy gradient at
        M=8192, V=256000 in bfloat16, timed in every earlier run, was skipped so on an H100 (13.1 of 79.2 GiB free)
        in a run where one warm worker kept 56 GiB reserved after its checks (forty-seventh session)."""
        free, total = torch.cuda.mem_get_info()
        if gpu_pause.window_asked_now():  # beside the run's paused tasks: no fact about the size and the card
            return self.result(
                Outcome.ERROR, f"{case} ran out of memory inside a measurement window, beside this run's paused "
                f"tasks ({free / 2**30:.1f} of {total / 2**30:.1f} GiB free now): opgate cannot tell whether it "
                "fits this GPU alone",
                remediation="Run again without OPGATE_MEASUREMENT_WINDOWS=1 (the measurements then run with the "
                            "GPU to themselves).")
        own = max(0, torch.cuda.memory_reserved() - held_before)
        held_elsewhere = total - free - own
        if held_elsewhere > OTHERS_HOLD_SHARE * total:  # no fact about the size and the card either
            from opgate.gpu.judge.oom import BESIDE_OTHERS_KEY

            earlier = (f", {held_before / 2**30:.1f} GiB of it this process's from before the check"
                       if held_before > OTHERS_HOLD_SHARE * total / 4 else "")
            return self.result(
                Outcome.ERROR, f"{case} ran out of memory while other processes held {held_elsewhere / 2**30:.1f} "
                f"of the GPU's {total / 2**30:.1f} GiB{earlier} ({free / 2**30:.1f} GiB free now): opgate cannot "
                "tell whether it fits this GPU alone",
                remediation="Run again when the GPU is not shared (nvidia-smi lists what holds its memory).",
                extra={BESIDE_OTHERS_KEY: round(held_elsewhere / 2**30, 1)})
        return None

    def _graph_out_of_memory(self, torch: Any, case: str, timing_text: str, figures: list[Figure],
                             extra: dict[str, Any], held_before: int = 0) -> CheckResult:
        """The timing stands; the capture check did not fit beside it (its static copies of the inputs, the graph's
        outputs and an eager call to compare: fla's cross-entropy gradient at M=8192, V=256000 in float32, 7.8 GiB a
        tensor, held 63 GiB and asked 15.6 GiB more of the H100's 79, forty-first session). Not a capture finding:
        warned, the capture unjudged."""
        unjudged = self._out_of_memory_beside_others(torch, case, held_before)
        if unjudged is not None:
            return unjudged
        free, total = torch.cuda.mem_get_info()
        why = (f"its static copies of the inputs and the graph's outputs do not fit this GPU's memory beside the "
               f"timing's inputs at {case} ({free / 2**30:.1f} of {total / 2**30:.1f} GiB free now)")
        figures.append(Figure("CUDA graph capture", f"not checked: {why}", key="verify.runtime.cuda_graph_capture"))
        extra["graph"] = {"checked": False, "cause": "out of memory"}
        return self.warned(f"{timing_text}; CUDA graph capture not checked: {why}", figures=figures, extra=extra,
                           remediation="Declare smaller perf_dims to check capture, or time on a GPU with more memory.")


# Extra compute-sanitizer options per tool (passed when the installed sanitizer knows them): racecheck's
# analysis report names the hazard instead of printing every racing access pair.
SANITIZER_TOOL_OPTIONS = {"racecheck": (("--racecheck-report", "analysis"),),
                          # a buffer freed with cudaFreeAsync on one stream while another stream still reads it
                          # is only reported with stream-ordered race tracking (Compute Sanitizer user guide,
                          # "Stream-ordered race detection"); off by default
                          # --padding (memcheck options): 64 KiB of unaddressable bytes after every allocation,
                          # so a read just past a tensor's end (a tail size) does not land in the next allocation
                          "memcheck": (("--track-stream-ordered-races", "all"), ("--padding", "65536"))}
# In the sanitized child every allocation must be its own: an access one element past a tensor that sits inside
# a block PyTorch's caching allocator (or CuPy's pool) owns is inside that block, and memcheck cannot see it.
# PyTorch reads this when its CUDA allocator starts (PyTorch's CUDA semantics notes, "Memory management").
SANITIZER_CHILD_ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
SANITIZER_REMEDIES = {
    "memcheck": "Fix the out-of-bounds or invalid access (a missing tail mask, a wrong stride or size).",
    "racecheck": "Add the missing barrier between the shared-memory writes and reads (__syncthreads, "
                 "tl.debug_barrier), or make the threads' shared-memory accesses disjoint.",
    "initcheck": "Write every element before it is read: torch.empty and cudaMalloc memory is uninitialized.",
    "synccheck": "Let every thread of the block reach each barrier: no __syncthreads inside divergent code.",
}


class VerifySanitizerCheck(GpuStageCheck):
    """One call of the implementation under one compute-sanitizer tool (memcheck by default), in its own
    process. The check's own process imports neither torch nor the spec until it runs a single child: the shared
    run's child loads them itself, and loading them here too cost each group's first task ~14 CPU-s for nothing on
    the H200 host (fla's import pulls in torch's compiler stack; sixteenth H200 session, py-spy)."""

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.probes.sanitizer import (SanitizerNotFound, find_compute_sanitizer, run_under_sanitizer,
                                                 supported_tool_options)

        from opgate.verify import sanitizer_batch

        payload = GpuStagePayload.from_dict(ctx.options)
        member = sanitizer_batch.Member(payload.op, payload.impl, payload.dtype)
        if payload.group_dir and not payload.group:
            # another member ran the group's shared run: a clean one covers this implementation (no torch here)
            record = sanitizer_batch.shared_record(payload.group_dir, member)
            if record is not None:
                return self._passed_in_shared_run(payload, record)
        tool = payload.tool
        try:
            path = find_compute_sanitizer()
            tool_options, dropped = supported_tool_options(path, SANITIZER_TOOL_OPTIONS.get(tool, ()))

            def under_tool(command: list[str], log_name: str) -> Any:
                # the log stays with the report's artefacts (a finding's evidence); without a folder it is removed
                log = Path(payload.artefact_dir) / log_name if payload.artefact_dir else None
                return run_under_sanitizer(command, tool=tool, tool_options=tool_options,
                                           timeout_s=SANITIZER_TIMEOUT_S, sanitizer=path, log_path=log,
                                           env={**os.environ, **SANITIZER_CHILD_ENV})

            if payload.group:
                sanitizer_batch.run_shared(Path(payload.group_dir), payload.spec_file, payload.group,
                                           lambda command: under_tool(command, f"sanitizer-{tool}-shared-run.log"))
                record = sanitizer_batch.shared_record(payload.group_dir, member)
                if record is not None:
                    return self._passed_in_shared_run(payload, record, tool_options, dropped)
            # a single run (alone, or after a shared run that was not clean): its sizes say where a finding is
            options, _ = self.begin(ctx)
            op, _ = load_implementation(options)
            sizes = sanitized_sizes(op)
            command = run_once_command(options, sanitized=True)
            run = under_tool(command, f"sanitizer-{tool}.log")
            crashed = None
            # a crash that names no error, or a log whose only errors are allocations that found the GPU full, is
            # no verdict on the code: one more run
            if run.crashed_without_findings or run.out_of_memory_only:
                crashed, run = run, under_tool(command, f"sanitizer-{tool}-again.log")
        except SanitizerNotFound as exc:
            raise SkipCheck(str(exc)) from None
        findings = run.report.findings
        reached = sanitized_steps_reached(run.stdout_tail)
        sizes_text = " and the ".join(f"{label} size {_dims_label(dims)}" for label, dims in sizes)
        extra = {"op": op.name, "implementation": options.impl, "dtype": options.dtype, "tool": tool,
                 "sanitizer": run.to_dict(), "sizes": [{"step": label, "dims": dims} for label, dims in sizes],
                 "steps_reached": reached, "tool_options": tool_options, "options_unsupported": dropped,
                 "allocator_caches": "off (PYTORCH_NO_CUDA_MEMORY_CACHING=1; CuPy memory pools disabled)"}
        run_figures = [Figure("run time under the sanitizer", round(run.duration_s, 1), "s",
                              key="verify.sanitizer.run_time_under_the_sanitizer")]
        crash_text = ""
        if crashed is not None:
            run_figures.append(Figure("runs under the sanitizer", 2, "",
                                      key="verify.sanitizer.runs_under_the_sanitizer"))
            if crashed.out_of_memory_only:
                crash_text = f"a first run found only {_out_of_memory_text(crashed)}"
                extra["first_run_out_of_memory"] = crashed.to_dict()
            else:
                first_words = crashed.last_words()
                crash_text = (f"a first run {crashed.exit_text()} {_where_stopped(crashed.stdout_tail)} with no "
                              "error in its log" + (f" ({first_words})" if first_words else ""))
                extra["first_run_crashed"] = crashed.to_dict()
        figures = _sanitizer_figures(tool, len(findings), sizes_text, tool_options, dropped, run_figures)
        if run.timed_out:
            return self.result(Outcome.ERROR, f"{tool} run timed out after {SANITIZER_TIMEOUT_S:g} s",
                               figures=figures, extra=extra)
        if run.out_of_memory_only:
            return self.result(Outcome.ERROR, f"could not judge under {tool}: both runs' only errors were "
                               f"{_out_of_memory_text(run)}", figures=figures, extra=extra,
                               remediation="Not a finding on the implementation: its allocations found the GPU's "
                                           "memory taken (nvidia-smi lists the processes). Run again when the memory "
                                           "is free, or give this run a GPU of its own (CUDA_VISIBLE_DEVICES).")
        if findings or run.sanitizer_flagged:
            where = describe_findings(findings) if findings else "the log has errors opgate's parser did not read"
            at = where_in_steps(findings, sizes, reached, run.stdout_tail)
            extra["finding_steps"] = sorted({step for f in findings for step in finding_steps(f)})
            return self.failed(f"{tool} reports {len(findings) or run.report.reported_error_count} error(s){at}: "
                               f"{where}", figures=figures,
                               remediation=SANITIZER_REMEDIES.get(tool, "") + (
                                   f" The whole log: {run.log_path}." if run.log_path else ""),
                               extra={**extra, "failure_class": "memory"})
        if run.returncode not in (0, None):
            words = run.last_words()
            again = ("" if crashed is None else f"; before it, {crash_text}" if crashed.out_of_memory_only
                     else f"; {crash_text}, and this second run too")
            return self.result(Outcome.ERROR, f"the run under {tool} {run.exit_text()} "
                               f"{_where_stopped(run.stdout_tail)}{again}" + (f": {words}" if words else ""),
                               figures=figures, extra=extra,
                               remediation=f"opgate could not judge this implementation under {tool}. Run the "
                                           "sanitizer's command (extra.sanitizer.command) by hand to see whether "
                                           "the program or compute-sanitizer crashes.")
        each = " each" if len(sizes) > 1 else ""
        again = f"; {crash_text} and was run again" if crashed is not None else ""
        return self.passed(f"{tool}: no errors in one call{each} at the {sizes_text} ({run.duration_s:.0f} s under "
                           f"the sanitizer, allocator caches off){again}", figures=figures, extra=extra)

    def _passed_in_shared_run(self, options: GpuStagePayload, record: dict[str, Any],
                              tool_options: list[str] | None = None, dropped: list[str] | None = None) -> CheckResult:
        """The verdict of an implementation a clean shared run covered (verify/sanitizer_batch.py)."""
        tool = options.tool
        sizes = [(str(step), dict(dims)) for step, dims in record["member_steps"]]
        sizes_text = " and the ".join(f"{label} size {_dims_label(dims)}" for label, dims in sizes)
        members = int(record["members"])
        shared_text = (f"one compute-sanitizer run of the {members} implementations of {Path(options.spec_file).name} "
                       f"under {tool} ({record['duration_s']:.0f} s), this one among them")
        figures = _sanitizer_figures(tool, 0, sizes_text, tool_options or [], dropped or [],
                                     [Figure("shared run", shared_text, key="verify.sanitizer.shared_run"),
                                      Figure("shared run time under the sanitizer", record["duration_s"], "s",
                                             key="verify.sanitizer.shared_run_time_under_the_sanitizer")])
        extra = {"op": options.op, "implementation": options.impl, "dtype": options.dtype, "tool": tool,
                 "shared_run": {k: record[k] for k in ("duration_s", "log_path", "members")},
                 "sizes": [{"step": label, "dims": dims} for label, dims in sizes], "steps_reached": sizes,
                 "allocator_caches": "off (PYTORCH_NO_CUDA_MEMORY_CACHING=1; CuPy memory pools disabled)"}
        each = " each" if len(sizes) > 1 else ""
        return self.passed(f"{tool}: no errors in one call{each} at the {sizes_text} ({shared_text}, allocator "
                           "caches off)", figures=figures, extra=extra)


def _out_of_memory_text(run: Any) -> str:
    calls = sorted({f.api_call or "?" for f in run.report.findings})
    return (f"{len(run.report.findings)} CUDA API call(s) out of device memory ({', '.join(calls)}: "
            "cudaErrorMemoryAllocation)")


def _sanitizer_figures(tool: str, findings: int, sizes_text: str, tool_options: list[str], dropped: list[str],
                       run_figures: list[Figure]) -> list[Figure]:
    """The figures of a sanitizer result, alone or covered by a shared run (`run_figures` say which)."""
    figures = [Figure("tool", tool, key="verify.sanitizer.tool"),
               Figure("findings", findings, "", Threshold(0, "==", "compute-sanitizer"),
                      key="verify.sanitizer.findings"),
               Figure("sizes run", sizes_text, key="verify.sanitizer.sizes_run"),
               Figure("allocator caches", "off: every allocation is its own, so an access past a tensor "
                                          "is outside an allocation", key="verify.sanitizer.allocator_caches"),
               *run_figures]
    if tool_options:
        figures.append(Figure("sanitizer options", " ".join(tool_options), key="verify.sanitizer.sanitizer_options"))
    if dropped:
        figures.append(Figure("options this compute-sanitizer lacks", ", ".join(dropped),
                              key="verify.sanitizer.options_this_compute_sanitizer_lacks"))
    return figures


# Seconds of the ncu stage's timeout (NcuStage.timeout_s) left to stop ncu and report after its profiling.
NCU_TEARDOWN_S = 30.0


def ncu_seconds(ctx: CheckContext) -> float:
    """How long ncu may profile: the task's timeout less NCU_TEARDOWN_S; run outside the runner, the stage's."""
    if ctx.timeout_s is None:
        from opgate.verify.builtin_stages import NcuStage

        return NcuStage.timeout_s - NCU_TEARDOWN_S
    return ctx.timeout_s - NCU_TEARDOWN_S


class VerifyNcuCheck(GpuStageCheck):
    """Nsight Compute counters of the implementation's kernels beside opgate's static byte model."""

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.core.work import operator_work
        from opgate.gpu.probes.ncu import NcuNotFound, run_ncu

        options, _ = self.begin(ctx)
        op, _ = load_implementation(options)
        try:
            kernels, stderr = run_ncu(run_once_command(options, profiled=True), timeout_s=ncu_seconds(ctx))
        except NcuNotFound as exc:
            raise SkipCheck(str(exc)) from None
        if not kernels:
            raise SkipCheck(f"ncu read no counters (profiling may be unavailable here): {stderr.strip()[-300:]}")
        model = operator_work(op, options.dtype, op.timing_dims())
        dram = sum(k.values.get("dram_bytes", 0.0) for k in kernels)
        figures = [Figure("kernels profiled", len(kernels), key="verify.ncu.kernels_profiled"),
                   Figure("DRAM bytes (ncu, all kernels)", round(dram), "B",
                          Threshold(round(model.bytes), "model", f"opgate's static model: {model.bytes_source}"),
                          key="verify.ncu.dram_bytes_ncu_all_kernels"),
                   Figure("DRAM bytes / model", round(dram / model.bytes, 3) if model.bytes else None,
                          key="verify.ncu.dram_bytes_model")]
        modelled_occupancy = {k.launch_id: model_occupancy_pct(k) for k in kernels}
        for k in kernels[:8]:
            v = k.values
            ours = modelled_occupancy[k.launch_id]
            kernel = slug(k.kernel[:60])  # the kernel leads its figures' keys, as reports have keyed them
            figures.append(Figure(f"{k.kernel[:60]} (block {k.block}, grid {k.grid})",
                                  f"achieved occupancy {v.get('achieved_occupancy_pct', float('nan')):.1f}% of "
                                  f"theoretical {v.get('theoretical_occupancy_pct', float('nan')):.1f}%"
                                  + (f" (opgate's occupancy model: {ours:.1f}%)" if ours is not None else "")
                                  + f", L2 hit {v.get('l2_hit_rate_pct', float('nan')):.1f}%, "
                                  f"DRAM {v.get('dram_bytes', 0):.0f} B, {v.get('duration_ns', 0) / 1e3:.1f} us",
                                  key=f"verify.ncu.{kernel}_block_{slug(str(k.block))}_grid_{slug(str(k.grid))}"))
            if any(name.startswith("smsp__average_warps_issue_stalled") for name in v):  # `opgate explain`'s diagnosis
                from opgate.gpu.judge.limiter import diagnose, limiter_profile

                figures.append(Figure(f"{k.kernel[:60]}: limiter", diagnose(limiter_profile(k)).line,
                                      key=f"verify.ncu.{kernel}_limiter"))
        extra = {"kernels": [k.__dict__ for k in kernels], "model_bytes": model.bytes, "stderr_tail": stderr,
                 "model_occupancy_pct": modelled_occupancy}
        reason = (f"{len(kernels)} kernel launch(es) profiled with --clock-control none: DRAM "
                  f"{dram / 1e6:.3f} MB vs {model.bytes / 1e6:.3f} MB modelled")
        l2_bytes = _l2_bytes()
        if l2_bytes and model.bytes and model.bytes < l2_bytes:
            # ncu flushes the caches before the kernel, so reads come from DRAM; written lines can stay in
            # the write-back L2 when the kernel ends and never show up as DRAM traffic.
            figures.append(Figure("modelled bytes vs L2 size", f"{model.bytes / 1e6:.3f} MB < {l2_bytes / 1e6:.1f} MB",
                                  key="verify.ncu.modelled_bytes_vs_l2_size"))
            reason += (f"; the working set fits in the {l2_bytes / 1e6:.0f} MB L2, so written bytes may stay there "
                       "and DRAM counts fall below the model (profile larger sizes to compare)")
        return self.passed(reason, figures=figures, extra=extra)


def model_occupancy_pct(kernel: Any) -> float | None:
    """opgate's occupancy model (analyze.occupancy, checked against the driver) for one profiled launch, from
    the block size, registers and shared memory ncu reported; None when ncu did not report them."""
    from opgate.core.limits import sm_limits
    from opgate.core.occupancy import KernelLaunch, calculate
    from opgate.model.errors import InputError

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


def _dims_label(dims: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in dims.items()) or "scalar"


def tail_dims(op: Any) -> dict[str, int] | None:
    """The sanitizer's second size: the first declared sizes with the innermost fuzzed dim set one past a power
    of two (2^k + 1 for the power at or above its first non-zero declared size): a block-sized kernel then has a
    last block with one live element, where a missing tail mask reads or writes past the end. None when no dim
    may change (every dim in exact_dims) or the tail equals the declared size."""
    fuzzed = [d for d in op.dims if d not in op.exact_dims]
    if not fuzzed:
        return None
    last = fuzzed[-1]
    base = next((size for size in op.dims[last] if size > 0), 0)
    if base <= 0:
        return None
    power = 1 << (base - 1).bit_length()
    dims = _first_nonempty_dims(op)
    dims[last] = power + 1
    full = op.with_derived(dims)
    return None if full == op.with_derived(_first_nonempty_dims(op)) else full


def _first_nonempty_dims(op: Any) -> dict[str, int]:
    """The first declared size of each dim, skipping 0 (an empty tensor launches nothing to check)."""
    return {dim: next((size for size in sizes if size > 0), sizes[0]) for dim, sizes in op.dims.items()}


def sanitized_sizes(op: Any) -> list[tuple[str, dict[str, int]]]:
    """(step, dims) the sanitized child runs, in order: the first declared sizes, then the tail size."""
    sizes = [("first declared", op.with_derived(_first_nonempty_dims(op)))]
    tail = tail_dims(op)
    if tail is not None:
        sizes.append(("tail", tail))
    return sizes


STEP_MARKER = "OPGATE_SANITIZED_STEP "


def _where_stopped(stdout: str) -> str:
    """'before its first call' or 'at the tail size N=4097': where a sanitized child that ended early was."""
    reached = sanitized_steps_reached(stdout)
    if not reached:
        return "before its first call"
    step, dims = reached[-1]
    return f"at the {step} size {_dims_label(dims)}"


def sanitized_steps_reached(stdout: str) -> list[tuple[str, dict[str, int]]]:
    """The steps the sanitized child started, from its stdout markers (the last one is where it was)."""
    import json

    steps = []
    for line in stdout.splitlines():
        if line.startswith(STEP_MARKER):
            try:
                data = json.loads(line[len(STEP_MARKER):])
            except ValueError:
                continue
            if data.get("event") == "start":
                steps.append((str(data["step"]), dict(data["dims"])))
    return steps


def _step_finished(stdout: str, step: str) -> bool:
    return any(line.startswith(STEP_MARKER) and '"event": "done"' in line and f'"step": "{step}"' in line
               for line in stdout.splitlines())


# The sanitized child calls the implementation through one function per step, so a finding's saved host
# backtrace (its Python frames) says at which size the kernel was launched.
_STEP_FUNCTIONS = {"sanitized_call_at_first_declared_size": "first declared", "sanitized_call_at_tail_size": "tail"}
_OWN_FRAMES = (*_STEP_FUNCTIONS, "run_sanitized", "sanitized_steps", "<module>", "_run_module_as_main", "_run_code", "call")


def finding_steps(finding: Any) -> list[str]:
    return [step for frame in getattr(finding, "python_frames", ()) for name, step in _STEP_FUNCTIONS.items()
            if frame.startswith(name + " ")]


def where_in_steps(findings: Any, sizes: list[tuple[str, dict[str, int]]],
                   reached: list[tuple[str, dict[str, int]]], stdout: str) -> str:
    """ " at the tail size M=4,N=257" and the like: from the findings' Python frames when the sanitizer saved a
    host backtrace, else from the step the child had reached when the errors stopped it."""
    dims = dict(sizes)
    steps = [step for step, _ in sizes if any(step in finding_steps(f) for f in findings)]
    if steps:
        text = " and the ".join(f"{step} size {_dims_label(dims[step])}" for step in steps)
        clean = [step for step, _ in sizes if step not in steps and _step_finished(stdout, step)]
        return f" at the {text}" + (f" (the {clean[0]} size ran clean)" if clean else "")
    if reached and not _step_finished(stdout, reached[-1][0]):
        return f" at the {reached[-1][0]} size {_dims_label(reached[-1][1])} (the run stopped there)"
    return " in the calls at the " + " and the ".join(f"{step} size {_dims_label(d)}" for step, d in sizes)


def launch_site(finding: Any) -> str:
    """The innermost Python frame of the launch that is not opgate's own: the user's line."""
    for frame in getattr(finding, "python_frames", ()):
        if not frame.startswith(tuple(name + " " for name in _OWN_FRAMES)):
            return frame
    return ""


def describe_findings(findings: Any, limit: int = 3) -> str:
    """Each distinct finding (kind x kernel x access) once, with the kernel, address, thread and block of its
    first report and how many reports are like it: what a person needs to find the line."""
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for finding in findings:
        groups.setdefault((finding.kind, finding.kernel, finding.access, finding.size_bytes), []).append(finding)
    parts = []
    for (kind, kernel, access, size), same in list(groups.items())[:limit]:
        first = same[0]
        what = kind.replace("_", " ")
        if access:
            what += f" ({access}" + (f" of {size} bytes" if size else "") + ")"
        text = f"{what} in {kernel or '?'}"
        if first.file and first.line:
            text += f" ({Path(first.file).name}:{first.line})"
        if first.address:
            text += f" at {first.address}"
            if first.address_note:
                text += f" ({first.address_note})"
        elif first.address_note:
            text += f" ({first.address_note})"
        if first.thread is not None:
            text += f", thread {_triple(first.thread)}"
        if first.block is not None:
            text += f" block {_triple(first.block)}"
        site = launch_site(first)
        if site:
            text += f", launched from {site}"
        if len(same) > 1:
            text += f" [{len(same)} reports like it]"
        parts.append(text)
    if len(groups) > limit:
        parts.append(f"{len(groups) - limit} more kind(s) in the JSON report")
    return "; ".join(parts)


def _triple(value: Any) -> str:
    return "(" + ",".join(str(v) for v in value) + ")"


def disable_allocator_caches() -> None:
    """In the sanitized child, before the implementation runs: PyTorch's caching allocator (also off through
    the environment the parent gives) and CuPy's device and pinned memory pools, the moment anything imports CuPy
    (not here: an implementation without CuPy would pay its import)."""
    from opgate.engine.import_hooks import after_import

    os.environ.update(SANITIZER_CHILD_ENV)
    after_import("cupy", _cupy_pools_off)


def _cupy_pools_off(cupy: Any) -> None:
    cupy.cuda.set_allocator(None)
    cupy.cuda.set_pinned_memory_allocator(None)


def run_sanitized(spec_file: str, op_name: str, impl_name: str, dtype: str) -> None:
    """What the sanitizer watches: allocator caches off, then one call at the first declared sizes and one at
    the tail size, each followed by a device sync; stdout markers say which step the child reached.

    An autotuned Triton kernel runs one config per key, as in the numerics (verify/backends/autotune_choice.py):
    Triton's autotuning would benchmark every config under the tool's instrumentation, and fla's activations (18
    configs per width) ran past 240 s per tool that way on the H200. OPGATE_AUTOTUNE=benchmark restores it."""
    from opgate.gpu.cuda_wait import apply_from_environment

    apply_from_environment()  # waits for the instrumented GPU asleep: the numerics beside it need the cores
    disable_allocator_caches()
    import torch

    op, implementation = load_implementation(ImplementationRef(spec_file, op_name, impl_name))
    with one_config_per_autotune_key():
        sanitized_steps(op, implementation, dtype, torch)


def one_config_per_autotune_key() -> Any:
    """The sanitized child's autotuning scope: one config per key (autotune_choice), unless turned off or no Triton."""
    import contextlib

    from opgate.verify.backends import autotune_choice

    if autotune_choice.wanted() and "triton" in sys.modules:
        return autotune_choice.rotating_configs()
    return contextlib.nullcontext()


def _print_step(event: str, step: str, dims: dict[str, int]) -> None:
    import json

    print(STEP_MARKER + json.dumps({"event": event, "step": step, "dims": dims}), flush=True)


def sanitized_steps(op: Any, implementation: Any, dtype: str, torch: Any, mark: Any = _print_step) -> None:
    """One call at each sanitized size, each followed by a device sync; `mark(event, step, dims)` before ("start")
    and after ("done") each."""
    for step, dims in sanitized_sizes(op):
        mark("start", step, dims)
        args = cuda_inputs(op, dims, dtype, seed=0, draw_on_gpu=False)
        call = sanitized_call_at_tail_size if step == "tail" else sanitized_call_at_first_declared_size
        call(implementation.fn, args)
        torch.cuda.synchronize()
        mark("done", step, dims)


def sanitized_call_at_first_declared_size(fn: Any, args: list[Any]) -> None:
    fn(*args)


def sanitized_call_at_tail_size(fn: Any, args: list[Any]) -> None:
    fn(*args)


def run_once(spec_file: str, op_name: str, impl_name: str, dtype: str, profiled: bool = False) -> None:
    """What Nsight Compute watches: one call at the first declared sizes, then a device sync.

    With `profiled` (Nsight Compute), the call runs at the operator's timing size, and a first call compiles (and autotunes) the kernels, and only the second runs between
    cudaProfilerStart and cudaProfilerStop: Nsight Compute, started with --profile-from-start off, then sees
    the implementation's own launches, not input generation, JIT compilation or autotuning."""
    import torch

    from opgate.verify.gradients import upstream_kept_on_device

    op, implementation = load_implementation(ImplementationRef(spec_file, op_name, impl_name))
    args = cuda_inputs(op, op.timing_dims() if profiled else op.default_dims(), dtype, seed=0, draw_on_gpu=False)
    # a gradient twin's upstream gradient is made by the first call, so a profiled second one launches only the
    # implementation's kernels (no copy or cast of opgate's)
    with upstream_kept_on_device():
        if profiled:
            implementation.fn(*args)
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
        implementation.fn(*args)
        torch.cuda.synchronize()
        if profiled:
            torch.cuda.profiler.stop()


if __name__ == "__main__":
    if "--sanitized" in sys.argv[5:]:
        run_sanitized(*sys.argv[1:5])
    else:
        run_once(*sys.argv[1:5], profiled="--profiled" in sys.argv[5:])
