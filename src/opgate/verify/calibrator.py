"""Calibration beside the checks: the parent's float64 truths and budgets, computed in a thread while the stages
that need no plan (runtime, sanitizer, recovery: they draw their own inputs) already run.

Each operator x dtype's plan file is handed to the runner (a TaskFeed) the moment it is written, so that dtype's
numerics checks start while the next dtype calibrates. The size-0 cases opgate adds are tried first in a child
(verify/empty_probe.py: a reference may kill the process on them), started at once and waited for only when the
calibration reaches them, after the operator's other cases.
"""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from opgate.model.errors import InputError
from opgate.model.results import CheckResult, Figure, Outcome, Threshold
from opgate.engine.runner import CheckTask, TaskFeed
from opgate.engine.specload import replaces_gpu_kernels
from opgate.engine.stages import OperatorPlan, Stage, stage_tasks
from opgate.verify.calibrate import (
    CACHE_COUNTS, FLOOR_EPS, K_RMSE, Calibration, CalibrationError, budgets_for_case, calibrate, deferral_seconds,
    truth_and_baseline,
)
from opgate.verify.inputs import (
    Case, first_with_same_values, inputs_generated_once, make_inputs, plan_cases,
)
from opgate.verify.planfile import PlanFile
from opgate.verify.replay import ReplayToken
from opgate.verify.resumed import ResumedChecks

if TYPE_CHECKING:
    from opgate.verify.check_seconds import Expectations


def calibration_threads() -> int:
    """torch's intra-op threads for the calibration: a quarter of the CPUs (at least 1). The checks run beside it,
    one thread each; an OpenMP team as wide as the machine then waits at every barrier for a preempted member
    (softmax's float32 calibration took 32.6 s with 16 threads, 9.3 s with 2, on the H200 host beside the checks;
    seventh H200 session, in the history of docs/benchmarks.md). On CI's 2 cores a team of 2 beside one numerics
    check was the same trap: fla_linear_cross_entropy.grad's float16 plan calibrated in 146 s with 2 threads and
    47 s with 1, and the operator took 489 s instead of 295 s (twenty-fourth session, benchmarks/results).
    OPGATE_CALIBRATION_THREADS overrides it."""
    import os

    override = os.environ.get("OPGATE_CALIBRATION_THREADS", "").strip()
    if override.isdigit() and int(override) > 0:
        return int(override)
    return max(1, (os.cpu_count() or 1) // 4)


# The plan summary's key for the cases opgate added that the reference raised on (left out of the plan)
REFERENCE_REFUSED_KEY = "reference_refused"


def is_added_empty_case(case: Case) -> bool:
    """A size-0 case opgate added (not one the spec declared)."""
    return case.origin != "declared" and case.is_empty


def _fatal_empty_cases(spec_file: Path, jobs: Sequence["CalibrationJob"]) -> dict[str, list[Case]]:
    """Per operator of one spec file: the opgate-added empty cases whose reference kills a process (tried in one
    child for the whole file: empty_probe.py)."""
    return _probe_file(spec_file, jobs, timed=False)[0]


def _probe_file(spec_file: Path, jobs: Sequence["CalibrationJob"],
                timed: bool) -> tuple[dict[str, list[Case]], dict[str, float]]:
    """(per operator, the empty cases that kill a process; with `timed`, per operator, the CPU seconds of one float64
    call of its reference at a representative case, which ranks the pool's plans: verify/plan_order.py). One child
    for the whole file (empty_probe.py), none where there is nothing to ask."""
    from opgate.verify.empty_probe import probe_spec
    from opgate.verify.plan_order import timing_requests

    probes = {job.op.name: (job.dtypes[0], [c for c in job.cases if is_added_empty_case(c)]) for job in jobs}
    probes = {name: probe for name, probe in probes.items() if probe[1]}
    requests = timing_requests(jobs) if timed else {}
    fatal: dict[str, list[Case]] = {job.op.name: [] for job in jobs}
    if not probes and not requests:
        return fatal, {}
    found = probe_spec(spec_file.resolve(), probes, requests)
    for name, (_, empty) in probes.items():
        fatal[name] = [c for i, c in enumerate(empty) if i not in found.survived[name]]
    return fatal, found.call_seconds


def probe_processes() -> int:
    """Empty-case probe children at once: each imports torch and a spec's libraries (seconds of CPU)."""
    import os

    return max(2, (os.cpu_count() or 2) // 4)


def calibration_result(op: Any, calibrations: dict[str, Calibration], budget: str, seed: int,
                       duration: float) -> CheckResult:
    """The `verify.<op>.calibration` result: the pooled eager-vs-float64 errors each dtype's budgets come from."""
    figures: list[Figure] = []
    for dtype, cal in calibrations.items():
        for o, out_dtype in enumerate(cal.out_dtypes):
            label = dtype if len(cal.out_dtypes) == 1 else f"{dtype} out{o}"
            output = "" if len(cal.out_dtypes) == 1 else f"out{o}_"  # the output leads the key, the dtype a label
            figures.append(Figure(f"{label}: eager baseline RMSE / RMS(truth), median", cal.pooled_rmse[o], "",
                                  Threshold(f"x{K_RMSE:g} + {FLOOR_EPS.get(out_dtype, 1.0):g} eps", "<=",
                                            f"calibrated over {cal.n_cases} cases; candidates get "
                                            f"{K_RMSE:g} x max(baseline here, this median) + floor"),
                                  key=f"verify.calibration.{output}eager_baseline_rmse_rms_truth_median",
                                  labels={"dtype": dtype}))
            figures.append(Figure(f"{label}: eager baseline p99.9 |error| / p99.9 |truth|, median",
                                  cal.pooled_quantile[o],
                                  key=f"verify.calibration.{output}eager_baseline_p99_9_error_p99_9_truth_median",
                                  labels={"dtype": dtype}))
        if cal.override:
            figures.append(Figure(f"{dtype}: user tolerance", f"atol {cal.override['atol']:g}, "
                                                             f"rtol {cal.override['rtol']:g}",
                                  key="verify.calibration.user_tolerance", labels={"dtype": dtype}))
    extra = {"budget": budget, "seed": seed, "calibrations": {d: c.summary() for d, c in calibrations.items()}}
    n = next(iter(calibrations.values())).n_cases if calibrations else 0
    reason = (f"budgets calibrated from PyTorch eager vs float64 over {n} cases for "
              f"{', '.join(calibrations)} ({budget} budget, seed {seed})")
    refused = [said for said in (c.summary().get(REFERENCE_REFUSED_KEY) for c in calibrations.values()) if said]
    if refused:  # never silent: the sizes opgate added that the reference does not define are not judged
        most = max(said["cases"] for said in refused)
        reason += (f"; {most} size(s) opgate added were left out because the reference raised on them "
                   f"({refused[0]['first']}): outside the operator's domain as its reference "
                   "defines it; declare the supported sizes to say so")
    return CheckResult(f"verify.{op.name}.calibration", f"{op.name}: calibrated error budgets", Outcome.PASSED,
                       reason, tuple(figures), "", duration, extra, stage="calibration", labels={"op": op.name})


def failed_calibration_result(result: CheckResult, failed: dict[str, FailedPlan],
                              calibrated: dict[str, Any]) -> CheckResult:
    """The calibration result of an operator some of whose dtypes could not be calibrated: an error (opgate could
    not judge them, exit 3), naming each dtype and what it raised; the calibrated dtypes keep their figures and
    their checks ran."""
    import dataclasses

    said = "; ".join(f"{d}: {f.error}" for d, f in failed.items())
    judged = f"; {', '.join(calibrated)} calibrated and judged" if calibrated else ""
    reason = (f"calibration failed in {', '.join(failed)}, so those dtypes are not judged ({said}){judged}")
    remedy = ("An out-of-memory error means the GPU was full of other work: re-run with fewer --jobs or alone on "
              "the GPU (OPGATE_BOUNDS_DEVICE=cpu keeps the calibration on the CPU). Anything else is a bug in "
              "opgate: please report it with this reason.")
    return dataclasses.replace(result, outcome=Outcome.ERROR, reason=reason, remediation=remedy,
                               extra={**result.extra, "failed_dtypes": {d: f.error for d, f in failed.items()}})


@dataclass
class CalibrationJob:
    """One operator's share of the calibration: what the thread needs and what it hands back."""

    op: Any  # opgate.core.spec.Operator
    dtypes: list[str]
    make_plan: Callable[[dict[str, Path]], OperatorPlan]  # the engine's OperatorPlan for these plan files
    spec_file: Path  # the spec file that defines `op`, as the user gave it
    cases: list[Case] = field(default_factory=list)
    # an operator an earlier run calibrated whole, now calibrated again only in `dtypes` (its other dtypes' checks
    # all finished: verify/resumed.py): the calibration result reported is that run's
    stored_calibration: CheckResult | None = None


@dataclass(frozen=True)
class FailedPlan:
    """An operator x dtype whose calibration raised something other than a reference's CalibrationError (a bug in
    opgate, the GPU out of memory): that dtype is not judged; the run goes on with every other plan."""

    dtype: str
    error: str  # "ExceptionType: message", shortened

    @classmethod
    def of(cls, dtype: str, exc: BaseException) -> "FailedPlan":
        return cls(dtype, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")


@dataclass(frozen=True)
class PlanOutcome:
    """What calibrating one operator x dtype hands back (from this thread or a calibration process): where its plan
    file is and the figures the calibration result reports (the attributes calibration_result reads)."""

    dtype: str
    path: str
    out_dtypes: list[str]
    pooled_rmse: list[float]
    pooled_quantile: list[float]
    n_cases: int
    override: dict[str, float] | None
    summary_data: dict[str, Any]
    offered: int  # cases offered (the plan less the empty cases that kill a process)
    fatal: list[str]  # labels of the opgate-added empty cases whose reference kills a process
    cache: dict[str, int] = field(default_factory=dict)  # cases whose bounds came from the disk cache / computed
    phases: dict[str, float] = field(default_factory=dict)  # seconds: truth and baseline, bound terms, the rest

    def summary(self) -> dict[str, Any]:
        return self.summary_data


def reference_is_deterministic(op: Any, case: Case, dtype: str, truth: Sequence[Any]) -> None:
    """The float64 reference called again on the same inputs must return the same values (NaN where NaN): a reference
    that is random on every call was calibrated to a 19% budget, and everything passed (issue #28). CalibrationError
    otherwise (the user's input: exit 2)."""
    import torch

    again, _ = truth_and_baseline(op, case, dtype)
    for index, (first, second) in enumerate(zip(truth, again)):
        same = first.shape == second.shape and bool(
            torch.equal(first, second) or (first.dtype.is_floating_point
                                           and torch.equal(first.isnan(), second.isnan())
                                           and torch.equal(first.nan_to_num(), second.nan_to_num())))
        if not same:
            differ = (f"largest difference {float((first.double() - second.double()).abs().nan_to_num().max()):.3g}"
                      if first.shape == second.shape else f"shapes {list(first.shape)} and {list(second.shape)}")
            raise CalibrationError(f"the reference of {op.name!r} returned different values for output {index} when "
                                   f"called twice on the same inputs ({case.label()}, {dtype}; {differ}): a "
                                   "reference must be deterministic; seed or remove its randomness")


REFERENCE_FORM_KEY = "reference_returns_tensor"


def reference_form(op: Any, cases: Sequence[Case], dtype: str) -> dict[str, bool]:
    """{REFERENCE_FORM_KEY: whether the reference returns one tensor (not a tuple or list)}, from its first case;
    {} without one. The numerics check holds each implementation to the same form: a one-tensor op whose kernel
    returned a one-element tuple passed (issue #28), and a caller's `y = op(x)` then holds a tuple."""
    import torch

    if not cases:
        return {}
    try:
        with torch.no_grad():
            result = op.reference(*make_inputs(op, cases[0], dtype).truth)
    except Exception:  # it returned on this case moments ago; nothing to say
        return {}
    return {REFERENCE_FORM_KEY: isinstance(result, torch.Tensor)}


def _truths_and_baselines(op: Any, dtype: str, cases: Sequence[Case], fatal_cases: Callable[[], list[Case]],
                          refused: list[str] | None = None) -> tuple[list[Case], list[Any], list[Any], list[Case]]:
    """(kept cases, truths, baselines, fatal empty cases). The opgate-added empty cases go last, and
    `fatal_cases()` (the empty-case probe's verdict) is asked for only when they are reached; an empty case the
    reference refuses is dropped, a declared case it refuses raises CalibrationError. Another case opgate added that
    the reference refuses is outside the operator's domain as the reference defines it: it is dropped too, and its
    reason goes into `refused` for the report. attorch's BatchNorm1d spec: F.batch_norm in training mode raises
    "Expected more than 1 value per channel" on the B=1, L=1 edge case opgate adds, and that one case stopped a
    17-operator run with exit 2 (thirty-fifth session). Call inside inputs_generated_once()."""
    fatal: list[Case] | None = None
    computed: dict[int, tuple[Any, Any]] = {}
    first = first_with_same_values(cases)
    for k in sorted(range(len(cases)), key=lambda k: is_added_empty_case(cases[k])):
        case = cases[k]
        if is_added_empty_case(case):
            if fatal is None:
                fatal = fatal_cases()
            if case in fatal:
                continue
        twin = first[k]  # a case holding another's values in other strides has its truth and baseline
        try:
            computed[k] = computed[twin] if twin in computed else truth_and_baseline(op, case, dtype)
        except CalibrationError as exc:
            if case.origin == "declared":
                raise  # the spec's own sizes: bad input
            # a size opgate added: an empty one the implementations may refuse as well (counted apart, as
            # dropped_empty_cases); any other is named in the report
            if refused is not None and not case.is_empty:
                refused.append(str(exc))
            continue
        if len(computed) == 1:
            reference_is_deterministic(op, case, dtype, computed[k][0])
    kept = sorted(computed)
    return ([cases[k] for k in kept], [computed[k][0] for k in kept], [computed[k][1] for k in kept],
            list(fatal or []))


def calibrate_plan(op: Any, dtype: str, cases: Sequence[Case], fatal_cases: Callable[[], list[Case]], budget: str,
                   seed: int, path: Path, gpu: bool = False) -> PlanOutcome:
    """Truth, eager baseline and budgets of one operator x dtype over its cases; writes the plan file to `path`.
    A reference that fails on a declared case raises CalibrationError. `gpu`: the run uses the GPU, so the bound
    terms of large cases may run there (verify/bounds_device.py)."""
    from opgate.core.torch_kernels import replaced_gpu_kernels
    from opgate.verify import bounds_device
    from opgate.verify.memory_guard import refuse_oversized_cases

    bounds_device.use_gpu(gpu)
    if gpu:
        _wait_for_the_gpu_as_asked()
    refuse_oversized_cases(op, cases, dtype)
    before = dict(CACHE_COUNTS)
    placement_before = dict(bounds_device.COUNTS)
    began = time.perf_counter()
    refused: list[str] = []
    with inputs_generated_once():  # truth, baseline, perturbation and bound read each case's once
        kept, truths, baselines, fatal = _truths_and_baselines(op, dtype, cases, fatal_cases, refused)
        truths_done = time.perf_counter()
        cal = calibrate(op, dtype, kept, truths, baselines, deferral_seconds(gpu))
        summary = {**cal.summary(), **({REFERENCE_REFUSED_KEY: {"cases": len(refused), "first": refused[0]}}
                                       if refused else {})}
        PlanFile(op.name, dtype, budget, seed, kept, truths, cal.budgets, cal.masks, cal.out_dtypes,
                 cal.pooled_rmse, cal.pooled_quantile, cal.n_cases,
                 {**summary, **reference_form(op, kept, dtype)}).save(path)
    phases = {"truth_and_baseline": round(truths_done - began, 3), "bounds": round(cal.bounds_seconds, 3),
              "budgets_and_plan_file": round(time.perf_counter() - truths_done - cal.bounds_seconds, 3)}
    return PlanOutcome(dtype, str(path), list(cal.out_dtypes), list(cal.pooled_rmse), list(cal.pooled_quantile),
                       cal.n_cases, dict(cal.override) if cal.override else None, summary,
                       len(cases) - len(fatal), [c.label() for c in fatal],
                       {**{k: CACHE_COUNTS[k] - before.get(k, 0) for k in CACHE_COUNTS},
                        # where the terms ran and what placing them cost (bounds_device.COUNTS), and plans calibrated
                        # in a process where a spec had replaced aten's GPU kernels (CalibrationPool keeps those
                        # specs apart)
                        **{k: n - placement_before.get(k, 0) for k, n in bounds_device.COUNTS.items()},
                        "plans_beside_replaced_kernels": int(bool(replaced_gpu_kernels()))},
                       phases)


_CUDA_WAIT_SET: list[str] = []  # this process's primary context already has its wait mode (the reason, "" if set)


def _wait_for_the_gpu_as_asked() -> None:
    """Bound terms on the GPU wait for it as the check workers do (gpu/cuda_wait.py; blocking sync unless
    OPGATE_CUDA_WAIT says otherwise): with CUDA's default spin, 8 calibration processes kept 5-7 of the H200 host's
    16 cores busy in a library run, mostly waiting for their turn on the time-sliced GPU."""
    import os

    from opgate.gpu import cuda_wait

    if not _CUDA_WAIT_SET:
        schedule = cuda_wait.SCHEDULES.get(os.environ.get(cuda_wait.ENV, "block").strip().lower())
        _CUDA_WAIT_SET.append("not asked" if schedule is None else cuda_wait.sleep_while_waiting(schedule))


# -- calibration processes (hosts with many cores) ---------------------------------------------------------------

def plan_file_path(workdir: Path, op_index: int, dtype_index: int, op_name: str, dtype: str) -> Path:
    """Where the calibration writes the plan of job `op_index`'s dtype `dtype_index` (the compile-ahead tasks watch
    for it: verify/compile_ahead.py)."""
    return workdir / f"plan-{op_index}-{dtype_index}-{op_name}-{dtype}.pt".replace("/", "_")


def calibration_processes(jobs: int, library: bool = False) -> int:
    """How many processes calibrate side by side: 0 (this thread) on small machines, where a process would only
    add its start-up to the same cores; a quarter of the CPUs (at most `jobs`, the number of operator x dtype
    plans) on larger ones, half of them for a `library` (several spec files or a folder): there every numerics
    check waits for its plan, and a quarter calibrated 19 of a library's ~135 plans in 260 s on the H200 host
    while the checks' slots idled (eleventh H200 session, in the history of docs/benchmarks.md).
    OPGATE_CALIBRATION_PROCESSES overrides it."""
    import os

    override = os.environ.get("OPGATE_CALIBRATION_PROCESSES", "").strip()
    if override.isdigit():
        wanted = int(override)
    else:
        cpus = os.cpu_count() or 1
        wanted = (cpus // 2 if library else cpus // 4) if cpus >= 8 else 0
    return max(0, min(wanted, jobs)) if jobs > 1 else 0


APART_PROCESSES_ENV = "OPGATE_CALIBRATION_APART_PROCESSES"


def apart_processes(processes: int, share: float) -> int:
    """Processes for the plans of specs that replace aten's GPU kernels, beside the pool's `processes`: their share
    of the plans (at least 1). Replaying three H100 library runs' plans (benchmarks/plan_order.py --apart), FlagGems'
    3 processes ended the calibration at 268-372 s against 204-277 s for the rest; 5 would end it at 229-316 s, but
    with more processes on a host whose cores are full. Measured (fiftieth session, one H100, the 5-process arm first):
    5 ended the calibration at 284 s against 313 s, but the numerics at 465 s against 460 s and the runtime warm-ups
    no sooner; the two more processes held 9-10 GiB of GPU memory, and four norm checks, queued again to run alone
    after an out-of-memory error, waited for the warm-ups. OPGATE_CALIBRATION_APART_PROCESSES sets it, for such an
    A/B."""
    from opgate.engine.settings import process_count

    override = process_count(APART_PROCESSES_ENV)  # a bad value: InputError (the engine asks at the run's start)
    return override if override is not None else max(1, round(processes * share))


def _process_start(processes: int, parent_pid: int, warm_gpu: bool = False) -> None:
    """Initializer of a calibration process: die with opgate, its share of the calibration's torch threads (the
    processes split calibration_threads(): four processes of four threads each beside 16 busy workers on the H200
    host were the OpenMP oversubscription calibration_threads() documents), the imports and first uses the bound
    terms would otherwise pay inside the first plan (first_uses)."""
    import signal

    from opgate.engine.children import die_with_parent

    die_with_parent(parent_pid)
    # Ctrl-C and a CI runner's SIGTERM reach the whole process group: a calibration process that died of them made
    # every plan still pending a "calibration failed (BrokenProcessPool)" error in the interrupted run's report (H200
    # library run, 2026-12-02). opgate stops these processes itself (CalibrationPool.close kills them).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    import torch

    torch.set_num_threads(max(1, calibration_threads() // max(1, processes)))
    import opgate.verify.calibrate  # noqa: F401  (paid while the parent still loads the specs)

    first_uses(torch, warm_gpu)


def first_uses(torch: Any, warm_gpu: bool) -> None:
    """What a calibration process's first plan would pay before its first result, paid while the parent still loads
    the specs: one reverse pass of a two-element graph (torch imports what autograd.grad with grad_outputs needs on
    its first call: torch.fx.experimental.symbolic_shapes and sympy in torch 2.11-2.13, 2.4 s of softmax's 5.8 s
    float32 calibration on the H100 host, whose sympy has no bytecode), and with `warm_gpu` the CUDA context the
    bound terms of the large cases run in (torch.cuda.init: 2.5 s in a fresh process there; verify/bounds_device.py).
    Best effort: a failure here is met again, and reported, where the terms need it."""
    x = torch.ones(2, dtype=torch.float64, requires_grad=True)
    torch.autograd.grad(x * x, x, grad_outputs=torch.ones_like(x))  # grad_outputs, as the terms pass them: the
    # shape check that imports symbolic_shapes runs only then
    if warm_gpu:
        try:
            torch.cuda.init()
        except Exception:  # no usable GPU after all: the terms stay on the CPU (bounds_device._wanted)
            pass


def _warm() -> int:
    import os

    return os.getpid()


def _calibrate_in_process(spec_file: str, op_name: str, dtype: str, cases: list[dict[str, Any]],
                          fatal: list[dict[str, Any]], budget: str, seed: int, path: str, gpu: bool) -> PlanOutcome:
    from opgate.core.torch_kernels import restore_native_kernels
    from opgate.verify.loaded_specs import loaded_operators

    op = next(o for o in loaded_operators(spec_file) if o.name == op_name)
    if gpu:  # this process runs references only: torch's own GPU kernels back, so its bound terms may use the GPU
        restore_native_kernels()
    fatal_cases = [Case.from_dict(c) for c in fatal]
    return calibrate_plan(op, dtype, [Case.from_dict(c) for c in cases], lambda: fatal_cases, budget, seed,
                          Path(path), gpu)


class CalibrationPool:
    """Processes that calibrate operators x dtypes side by side (each loads the spec files it is given once).
    Started before the specs are loaded, so their imports overlap the parent's.

    A spec whose import replaces aten's GPU kernels (FlagGems' only_enable) changes its process for good: every later
    plan there keeps its bound terms on the CPU (verify/bounds_device.py). On a GPU run such specs' plans go to
    processes of their own (`isolated`, started on first use, as many as their share of the plans; a run of such
    specs alone keeps nothing apart, and once nothing else is left they take any process), so the others keep the
    GPU. In a library run on the H200 host every pool process had loaded a FlagGems file within minutes, and 54 of
    7,285 cases ran their terms on the GPU (499 of 3,295 in the run before, on a fresh machine); fla_short_conv's
    float64 convolution, 1,918 s of the run's 2,923 s of bound terms, stayed on the CPU. Since then a calibration
    process takes the replaced kernels back before it calibrates (core/torch_kernels.restore_native_kernels: it runs
    references only), so FlagGems' own plans may use the GPU too (1,638 of their cases had kept their terms on the CPU
    in the twenty-third session's library run, 1,333 s of bound terms); the processes stay apart in case a
    replacement cannot be taken back (a C++ extension's)."""

    def __init__(self, processes: int, warm_gpu: bool = False) -> None:
        import os

        self.processes = processes
        self.warm_gpu = warm_gpu  # each process creates its CUDA context while the specs load (first_uses)
        self.isolated_processes = max(1, processes // 4)  # until isolate() says how many
        self._parent = os.getpid()
        self.executor = self._executor(processes)
        self._isolated: Any = None
        self._warming = [self.executor.submit(_warm) for _ in range(processes)]

    def _executor(self, workers: int) -> Any:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # each process takes the main pool's share of the calibration's torch threads
        return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_process_start,
                                   initargs=(self.processes, self._parent, self.warm_gpu))

    def isolate(self, processes: int) -> None:
        """How many processes the isolated side gets (before its first plan)."""
        if self._isolated is None:
            self.isolated_processes = max(1, min(processes, self.processes))

    def capacity(self, isolated: bool) -> int:
        """How many plans may run at once on that side."""
        return self.isolated_processes if isolated else self.processes

    def submit(self, *args: Any, isolated: bool = False) -> "Future[PlanOutcome]":
        """Calibrate one plan; `isolated`: in the processes kept for specs that replace aten's GPU kernels."""
        if not isolated:
            return self.executor.submit(_calibrate_in_process, *args)
        if self._isolated is None:
            self._isolated = self._executor(self.isolated_processes)
        return self._isolated.submit(_calibrate_in_process, *args)

    def release(self) -> None:
        """Every plan is calibrated: the processes exit now, not at the run's end. Each holds a CUDA context and
        whatever its last bound terms left (on the H100 host a library run's runtime measurements ran out of memory
        beside them, in the thirty-ninth session); the numerics checks and measurements still to come need none of
        them."""
        for executor in (self.executor, self._isolated):
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)

    # Seconds to reap the killed processes, all together: a process with a CUDA context (bound terms on the GPU)
    # takes a moment to die, and joining 8 of them one after another outlasted `timeout -k 5`'s grace on the H200
    # host, losing an interrupted library run's report. One not reaped by then stays a zombie until the CLI exits.
    REAP_S = 2.0

    def close(self) -> None:
        import time

        executors = [e for e in (self.executor, self._isolated) if e is not None]
        processes = [p for e in executors for p in (getattr(e, "_processes", None) or {}).values()]
        for executor in executors:
            executor.shutdown(wait=False, cancel_futures=True)
        for process in processes:  # an interrupted run leaves no calibration behind: all killed first
            if process.is_alive():
                process.kill()
        from opgate.engine.children import reap_seconds_left

        deadline = time.monotonic() + reap_seconds_left(self.REAP_S)  # interrupted: the run's one deadline
        for process in processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))


class Calibrator(threading.Thread):
    """Calibrates every job (in this thread, or in a CalibrationPool's processes side by side); puts the tasks of
    the stages that need plans into `feed` as each operator x dtype is done and closes it (with the error, when a
    reference cannot be evaluated: an InputError, exit 2, as before any check ran). `results` gets each operator's
    calibration result and the stages' up-front verdicts."""

    def __init__(self, jobs: Sequence[CalibrationJob], stages: Sequence[Stage], unmet: dict[str, str | None],
                 feed: TaskFeed, budget: str, seed: int, workdir: Path, token: ReplayToken | None,
                 info: dict[str, Any], pool: CalibrationPool | None = None,
                 resumed: ResumedChecks | None = None, ahead: dict[int, list[Any]] | None = None,
                 expectations: Expectations | None = None) -> None:
        super().__init__(name="opgate-calibration", daemon=True)
        self.jobs, self.stages, self.unmet, self.feed = list(jobs), list(stages), unmet, feed
        self.budget, self.seed, self.workdir, self.token = budget, seed, workdir, token
        self.info, self.pool = info, pool
        # checks an earlier run finished (verify/resumed.py): reported from there, not handed over
        self.resumed = resumed if resumed is not None else ResumedChecks()
        self.results: list[CheckResult] = []
        self.task_keys: dict[str, tuple[int, int, int]] = {}  # check id -> (stage order, operator, sequence)
        self.stopped = threading.Event()
        self.started_at = 0.0
        self.spans: dict[str, list[float]] = {}  # "op dtype" -> [start, end], seconds after the thread started
        # operators whose every dtype is calibrated and every task handed over (added last: an interrupted run's
        # complete spec files, PreparedRun.complete_files)
        self.operators_done: set[str] = set()
        self.plans_done: set[tuple[str, str]] = set()  # (operator, dtype) calibrated, its tasks handed over
        self.task_dtypes: dict[str, str] = {}  # check id -> the dtype of the one plan it was handed over with
        # job index -> its compile-ahead tasks (verify/compile_ahead.py), fed once the plans are ranked
        self.ahead = dict(ahead or {})
        # each numerics check's seconds in earlier runs (verify/check_seconds.py): the longest ready ones start first
        self.expectations = expectations

    def run(self) -> None:
        self.started_at = time.perf_counter()
        import torch

        torch.set_num_threads(calibration_threads())
        try:
            with ThreadPoolExecutor(max_workers=probe_processes(), thread_name_prefix="opgate-empty") as probes:
                by_file: dict[Path, list[int]] = {}
                for index, job in enumerate(self.jobs):
                    job.cases = plan_cases(job.op, self.budget, self.seed)
                    by_file.setdefault(job.spec_file.resolve(), []).append(index)
                # one probe child per spec file, in the order the files come (the first operators calibrate first);
                # for the pool it also times each reference once, which ranks the plans (verify/plan_order.py), where
                # plans wait for a process (a single file's few plans all start at once: nothing to rank, and no child
                # to wait for where the file has no empty case)
                if self.pool is not None and self.token is None:
                    ranked = sum(len(job.dtypes) for job in self.jobs) > self.pool.processes
                    probed = {file: probes.submit(_probe_file, file, [self.jobs[k] for k in indices], ranked)
                              for file, indices in by_file.items()}
                    self._calibrate_in_pool(self.pool, by_file, probed)
                else:
                    self._feed_ahead({})  # no ranking here: in the order of the jobs
                    fatal_by_file = {file: probes.submit(_fatal_empty_cases, file, [self.jobs[k] for k in indices])
                                     for file, indices in by_file.items()}
                    for index, job in enumerate(self.jobs):
                        if self.stopped.is_set():
                            break
                        found = fatal_by_file[job.spec_file.resolve()]
                        self._calibrate(index, job, lambda found=found, name=job.op.name: found.result()[name])
        except BaseException as exc:  # noqa: BLE001 - handed to the runner, re-raised in the main thread
            self.feed.close(exc)
            return
        self.feed.close()
        if self.pool is not None and not self.stopped.is_set():  # every plan is in: the processes may go
            try:
                self.pool.release()
            except Exception:  # the run's end kills them anyway (CalibrationPool.close)
                pass

    def _plan_path(self, op_index: int, dtype_index: int, op: Any, dtype: str) -> Path:
        return plan_file_path(self.workdir, op_index, dtype_index, op.name, dtype)

    def _input_error(self, job: CalibrationJob, exc: Exception) -> InputError:
        # The reference is the user's input: one line, exit 2 (never "a bug in opgate").
        return InputError(f"spec file {job.spec_file}: {exc}; fix the reference (it defines the operator's "
                          "meaning) or the dims/dtypes it is given")

    def _calibrate(self, op_index: int, job: CalibrationJob, fatal_cases: Callable[[], list[Case]]) -> None:
        """One operator's dtypes in turn, in this thread."""
        t0 = time.perf_counter()
        outcomes: dict[str, Any] = {}
        for dtype in job.dtypes:
            if self.stopped.is_set():  # the run ended (Ctrl-C, an error): no more plans
                return
            begin = time.perf_counter() - self.started_at
            try:
                if self.token:
                    outcome: Any = self._replay_plan(job, dtype, self._plan_path(op_index, len(outcomes), job.op,
                                                                                 dtype), fatal_cases)
                else:
                    outcome = calibrate_plan(job.op, dtype, job.cases, fatal_cases, self.budget, self.seed,
                                             self._plan_path(op_index, len(outcomes), job.op, dtype),
                                             bool(self.info.get("gpu")))
            except CalibrationError as exc:
                raise self._input_error(job, exc) from None
            except InputError:  # the spec's own sizes (refuse_oversized_cases): bad input, exit 2
                raise
            except Exception as exc:  # contained: this dtype is not judged, the rest of the run goes on
                outcome = FailedPlan.of(dtype, exc)
            self.spans[f"{job.op.name} {dtype}"] = [round(begin, 2), round(time.perf_counter() - self.started_at, 2)]
            self._done_dtype(op_index, job, outcome, outcomes, lag_s=time.perf_counter() - t0)
        self._done_operator(op_index, job, outcomes, time.perf_counter() - t0)

    def _calibrate_in_pool(self, pool: CalibrationPool, by_file: dict[Path, list[int]],
                           probed: dict[Path, "Future[tuple[dict[str, list[Case]], dict[str, float]]]"]) -> None:
        """Every operator x dtype in the pool's processes: a spec file's plans become ready the moment its
        empty-case probe is back (files in any order), and each plan is handed over the moment it is done.

        The pool gets no more plans than it has processes; each free process takes the costliest ready plan (by
        the probe's timed call: plan_order.estimated_seconds). In file order, a library's heaviest plans (fla's loss
        gradients) started last and ran on alone for minutes while everything else waited for their numerics (H200
        host: 81 of 135 plans done at 320 s, none more by 485 s); longest first, they overlap the rest."""
        from concurrent.futures import FIRST_COMPLETED, wait

        from opgate.verify.plan_order import by_elements_only, estimated_seconds, plan_cost

        pending: dict[Future[PlanOutcome], tuple[int, str, float, bool]] = {}  # op, dtype, submitted, apart
        ready: list[tuple[float, int, int, int, list[Case]]] = []  # (-cost, arrival, op index, dtype index, fatal)
        probing = {future: file for file, future in probed.items()}
        estimates = self.info.setdefault("plan_estimates_s", {})  # op -> [estimate, "call" | "elements"]
        outcomes: dict[int, dict[str, Any]] = {index: {} for index in range(len(self.jobs))}
        first_start: dict[int, float] = {}
        costs: dict[int, float] = {}  # job index -> its plans' estimate
        arrivals = itertools.count()

        # a spec whose import replaced aten's GPU kernels calibrates apart on a GPU run (CalibrationPool), in as many
        # processes as its share of the plans; a run of such specs alone has nothing to keep apart from
        replacing = {i for i, job in enumerate(self.jobs) if replaces_gpu_kernels(job.spec_file)}
        apart = bool(self.info.get("gpu")) and 0 < len(replacing) < len(self.jobs)
        if apart:
            share = sum(len(self.jobs[i].dtypes) for i in replacing) / sum(len(job.dtypes) for job in self.jobs)
            pool.isolate(apart_processes(pool.processes, share))

        def others_left() -> bool:
            """Whether a plan of a spec that replaced nothing is still to be submitted (ready, or its file probing)."""
            return (any(entry[2] not in replacing for entry in ready)
                    or any(i not in replacing for file in probing.values() for i in by_file[file]))

        def top_up() -> None:
            ready.sort()
            running = {True: 0, False: 0}
            for _, _, _, side in pending.values():
                running[side] += 1
            waiting = []
            for entry in ready:  # the costliest first, each on its side while that side has room
                index, k, fatal_cases = entry[2], entry[3], entry[4]
                side = apart and index in replacing
                if side and running[True] >= pool.capacity(True) and not others_left():
                    side = False  # nothing left that its import could keep off the GPU: any free process
                if running[side] >= pool.capacity(side):
                    waiting.append(entry)
                    continue
                running[side] += 1
                job = self.jobs[index]
                dtype = job.dtypes[k]
                submitted = pool.submit(str(job.spec_file.resolve()), job.op.name, dtype,
                                        [c.to_dict() for c in job.cases], [c.to_dict() for c in fatal_cases],
                                        self.budget, self.seed, str(self._plan_path(index, k, job.op, dtype)),
                                        bool(self.info.get("gpu")), isolated=side)
                pending[submitted] = (index, dtype, time.perf_counter(), side)
            ready[:] = waiting

        try:
            while (pending or probing or ready) and not self.stopped.is_set():
                top_up()
                done, _ = wait([*probing, *pending], timeout=1.0, return_when=FIRST_COMPLETED)
                for future in done:
                    if future in probing:
                        fatal, call_seconds = future.result()
                        for index in by_file[probing.pop(future)]:
                            job = self.jobs[index]
                            call_s = call_seconds.get(job.op.name)
                            cost = (plan_cost(job.op, job.cases) if by_elements_only()
                                    else estimated_seconds(job.op, job.cases, call_s))
                            estimates[job.op.name] = [float(f"{cost:.4g}"), "elements" if call_s is None else "call"]
                            ready += [(-cost, next(arrivals), index, k, fatal[job.op.name])
                                      for k in range(len(job.dtypes))]
                            costs[index] = cost
                        if not probing:  # every plan is ranked: the compile-ahead tasks, latest plans' first
                            self._feed_ahead(self._predicted_plan_ends(pool, costs, replacing if apart else set()))
                        continue
                    index, dtype, submitted, _ = pending.pop(future)
                    job = self.jobs[index]
                    try:
                        outcome = future.result()
                    except CalibrationError as exc:
                        raise self._input_error(job, exc) from None
                    except InputError:
                        raise
                    except Exception as exc:  # contained (FailedPlan); a dead calibration process too
                        outcome = FailedPlan.of(dtype, exc)
                    first_start.setdefault(index, submitted)
                    self.spans[f"{job.op.name} {dtype}"] = [round(submitted - self.started_at, 2),
                                                            round(time.perf_counter() - self.started_at, 2)]
                    self._done_dtype(index, job, outcome, outcomes[index])
                    if len(outcomes[index]) == len(job.dtypes):
                        self._done_operator(index, job, {d: outcomes[index][d] for d in job.dtypes},
                                            time.perf_counter() - first_start[index])
        finally:
            for future in pending:
                future.cancel()

    def _predicted_plan_ends(self, pool: CalibrationPool, costs: dict[int, float],
                             apart: set[int]) -> dict[tuple[int, str], float]:
        """(job index, dtype) -> when its plan is predicted to be written: each side of the pool (the plans kept
        apart, the rest) taking its plans costliest first in its own processes (plan_order.predicted_ends)."""
        from opgate.verify.plan_order import predicted_ends

        ends: dict[tuple[int, str], float] = {}
        for side in (True, False):
            estimates = {(index, dtype): cost for index, cost in costs.items() if (index in apart) == side
                         for dtype in self.jobs[index].dtypes}
            if estimates:
                ends.update(predicted_ends(estimates, pool.capacity(side)))
        return ends

    def _feed_ahead(self, ends: dict[tuple[int, str], float]) -> None:
        """Hand the compile-ahead tasks to the run, those of the plans predicted to be written last first (`ends`;
        empty: in the order of the jobs). A task helps only until its plan is written (verify/compile_ahead.py)."""
        from opgate.verify.plan_order import latest_plans_first
        from opgate.verify.tasks import CompileAheadPayload

        if not self.ahead or self.stopped.is_set():
            return
        entries = [((index, CompileAheadPayload.from_dict(task.context.options).dtype), task)
                   for index in sorted(self.ahead) for task in self.ahead[index]]
        # a plan written before the last file's probe was back has nothing left to compile ahead of
        entries = [(plan, task) for plan, task in entries
                   if (self.jobs[plan[0]].op.name, plan[1]) not in self.plans_done]
        tasks = latest_plans_first(entries, ends)
        self.ahead = {}
        self.info["compile_ahead_queue"] = {
            "by": "predicted plan end" if ends else "job order",
            "fed_at_s": round(time.perf_counter() - self.started_at, 2),
            "first": [task.check_id.removeprefix("verify.").removesuffix(".compile_ahead") for task in tasks[:12]]}
        self.feed.put(tasks)

    def _done_dtype(self, op_index: int, job: CalibrationJob, outcome: Any, outcomes: dict[str, Any],
                    lag_s: float = 0.0) -> None:
        """Record one operator x dtype's plan and hand its per-dtype tasks (numerics) to the run. `lag_s`: seconds
        since this thread began the operator's calibration (OperatorPlan.calibration_began_at; 0 from the pool, whose
        processes calibrate an operator's dtypes side by side)."""
        op = job.op
        if isinstance(outcome, FailedPlan):
            outcomes[outcome.dtype] = outcome
            return
        self.info["case_counts"][op.name] = outcome.offered
        if outcome.fatal:
            self.info.setdefault("fatal_empty_cases", {})[op.name] = outcome.fatal
        if outcome.n_cases < outcome.offered:
            self.info.setdefault("dropped_empty_cases", {})[f"{op.name}.{outcome.dtype}"] = (
                outcome.offered - outcome.n_cases)
        outcomes[outcome.dtype] = outcome
        if outcome.phases:
            self.info.setdefault("calibration_phases_s", {})[f"{op.name} {outcome.dtype}"] = outcome.phases
        # per plan too: which plans' terms the GPU took, and which stayed on the CPU beside replaced kernels
        self.info.setdefault("calibration_bounds_cache", {})[f"{op.name} {outcome.dtype}"] = {
            key: count for key, count in outcome.cache.items() if count}
        counts = self.info.setdefault("bounds_cache", {"hit": 0, "computed": 0})
        for key, count in outcome.cache.items():
            counts[key] = counts.get(key, 0) + count
        per_dtype = [s for s in self.stages if s.needs.calibration and s.per_dtype_plans]
        plan = job.make_plan({outcome.dtype: Path(outcome.path)})
        if lag_s > 0:  # the epoch seconds the operator's calibration began: its checks measure their lag at start
            plan.calibration_began_at = time.time() - lag_s
        self._hand_over(op_index, plan, per_dtype)
        self.plans_done.add((op.name, outcome.dtype))

    def _done_operator(self, op_index: int, job: CalibrationJob, outcomes: dict[str, Any], seconds: float) -> None:
        per_operator = [s for s in self.stages if s.needs.calibration and not s.per_dtype_plans]
        failed = {d: o for d, o in outcomes.items() if isinstance(o, FailedPlan)}
        calibrated = {d: o for d, o in outcomes.items() if d not in failed}
        result = calibration_result(job.op, calibrated, self.budget, self.seed, seconds)
        if failed:
            result = failed_calibration_result(result, failed, calibrated)
        elif job.stored_calibration is not None:  # calibrated again in some dtypes only: the whole one stands
            result = job.stored_calibration
        self.results.append(result)
        if calibrated:
            self._hand_over(op_index, job.make_plan({d: Path(o.path) for d, o in calibrated.items()}), per_operator)
        self.operators_done.add(job.op.name)
        file = job.spec_file.resolve()
        if all(other.op.name in self.operators_done for other in self.jobs if other.spec_file.resolve() == file):
            self.feed.group_done(str(file))  # its measurements may start (CheckTask.group)

    def _expected(self, task: CheckTask) -> CheckTask:
        """`task` with the seconds its check is expected to take (a numerics check; verify/check_seconds.py)."""
        return self.expectations.applied(task) if self.expectations is not None else task

    def _hand_over(self, op_index: int, plan: OperatorPlan, stages: Sequence[Stage]) -> None:
        if not stages:
            return
        items, preset = stage_tasks(plan, stages, self.unmet)
        items, stored = self.resumed.take(items)
        self.results += preset + stored
        single = next(iter(plan.plans)) if len(plan.plans) == 1 else None
        items = [(order, self._expected(task)) for order, task in items]
        for order, task in items:
            self.task_keys[task.check_id] = (order, op_index, len(self.task_keys))
            if single is not None:
                self.task_dtypes[task.check_id] = single
        self.feed.put([task for _, task in sorted(items, key=lambda item: item[0])])

    def _replay_plan(self, job: CalibrationJob, dtype: str, path: Path, fatal_cases: Callable[[], list[Case]],
                     ) -> PlanOutcome:
        """A plan of one case (from a replay token) judged with the full plan's pooled calibration."""
        from opgate.verify import bounds_device
        from opgate.verify.memory_guard import refuse_oversized_cases

        bounds_device.use_gpu(bool(self.info.get("gpu")))
        assert self.token is not None
        op, case = job.op, self.token.case
        refuse_oversized_cases(op, [case], dtype)
        with inputs_generated_once():
            kept, truths, baselines, fatal = _truths_and_baselines(op, dtype, job.cases, fatal_cases)
            cal = calibrate(op, dtype, kept, truths, baselines, deferral_seconds(bool(self.info.get("gpu"))))
            truth, baseline = truth_and_baseline(op, case, dtype)
            budgets, masks, out_dtypes = budgets_for_case(op, dtype, case, truth, baseline, cal.pooled_rmse,
                                                          cal.pooled_quantile, cal.n_cases, cal.pooled_element_rho)
        PlanFile(op.name, dtype, self.budget, self.seed, [case], [truth], [budgets], [masks], out_dtypes,
                 cal.pooled_rmse, cal.pooled_quantile, cal.n_cases,
                 {**cal.summary(), **reference_form(op, kept, dtype)}).save(path)
        return PlanOutcome(dtype, str(path), list(cal.out_dtypes), list(cal.pooled_rmse), list(cal.pooled_quantile),
                           cal.n_cases, dict(cal.override) if cal.override else None, cal.summary(),
                           len(job.cases) - len(fatal), [c.label() for c in fatal])
