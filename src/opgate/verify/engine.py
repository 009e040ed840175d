"""`opgate verify` in the parent process: select, plan, calibrate, fan out, collect.

1. Load the spec file (pre-flight in a child, specload.py) and pick the operators, implementations and dtypes
   asked for; on a GPU host spare warm workers start importing meanwhile, and once the selection is known the
   implementations' workers are prestarted.
2. Every chosen stage (a plugin: opgate/engine/stages.py, the shipped ones in verify/builtin_stages.py) turns each
   op into check tasks; a stage whose needs are not met here (no GPU, no compute-sanitizer) is one `skipped`
   line. The stages that need no calibration (runtime, recovery, sanitizer: they draw their own inputs) start at
   once, in the runner (opgate.engine.runner), in warm workers, one pool per implementation: a crash or hang is an
   `error` (or, for a case, a FAIL: resume.py) of that check only.
3. Meanwhile a thread (verify/calibrator.py) plans each op x dtype's cases, computes the float64 truth and the
   eager baseline once per case (here, on the CPU), calibrates the budget and writes it all to a plan file, whose
   numerics tasks join the run through a TaskFeed as soon as it is written.
4. Return a RunReport: one calibration result per op, one result per check in stage order; whole-spec stages
   (`opgate analyze`'s, through the same registry) join theirs.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from opgate.model.errors import InputError
from opgate.model.results import CheckResult, Outcome, RunReport
from opgate.checks.base import CheckContext
from opgate.engine.runner import CheckTask, TaskFeed, WarmPool, warm_worker_limit
from opgate.engine.settings import process_count
from opgate.engine.stages import OperatorPlan, Stage, StageOptions, stage_tasks
from opgate.verify.backends.base import ImplementationChoice, implementation_choices
from opgate.verify.calibrator import (APART_PROCESSES_ENV, CalibrationJob, CalibrationPool, Calibrator,
                                      calibration_processes)
from opgate.verify.gradients import with_gradient_operators
from opgate.verify.inputs import Case, budget_plan
from opgate.verify.replay import ReplayToken
from opgate.verify.resumed import ResumedChecks, keepable
from opgate.verify.resume import NotedFollowUps
from opgate.core.spec import Operator

CHECK_TARGET = "opgate.verify.check:VerifyImplementationCheck"  # the numerics check (resume.py reads it)
# Seconds one implementation x dtype may take (all its cases, shrinking included) before it is killed.
TIMEOUT_BY_BUDGET = {"quick": 300.0, "standard": 600.0, "thorough": 1800.0}
# Spare warm workers started before the spec is read (GPU hosts): at most this many, fewer with fewer --jobs.
SPARE_WORKERS_MAX = 12
SPARE_WORKERS_ENV = "OPGATE_SPARE_WORKERS"  # a count overrides it (0: none), for measuring what they cost


@dataclass(frozen=True)
class VerifyRequest:
    spec_file: Path  # the first (or only) spec file; `spec_files` lists them all when several are verified at once
    ops: Sequence[str] = ()
    impls: Sequence[str] = ()
    dtypes: Sequence[str] = ()
    seed: int = 0
    budget: str = "standard"
    replay: str | None = None
    out_dir: Path = Path("opgate-report")
    # opgate's extras (the reference through torch.compile, ONNX Runtime, TVM: a cross-check of the budget) are
    # opt-in; an --impl naming one runs it
    extras: bool = False
    shrink: bool = True
    jobs: int = 2  # the CLI's default is default_jobs()
    timeout_s: float | None = None
    # numerics always; runtime (timing, roofline fraction, CUDA graphs), sanitizer and recovery on a GPU;
    # ncu and portability / occupancy / roofline (`opgate analyze`'s stages) on request.
    stages: Sequence[str] = ("numerics", "runtime", "sanitizer", "recovery")
    # compute-sanitizer tools the sanitizer stage runs, one check each (memcheck's id ends in `.sanitizer`,
    # the others in `.racecheck` / `.initcheck` / `.synccheck`). All four by default: on the H200 each
    # adds 5-11 s per implementation and they run side by side (the history of docs/benchmarks.md).
    sanitizer_tools: Sequence[str] = ("memcheck", "racecheck", "initcheck", "synccheck")
    # Seconds one call of the implementation on one case may run before it counts as a hang (a `crash` of that
    # case; the other cases still run). None: resume.CASE_TIMEOUT_S; at most 90% of timeout_s.
    case_timeout_s: float | None = None
    # Several spec files in one run (`opgate verify a.py b.py DIR`): one report, one worker pool, one calibration
    # queue. Empty: just `spec_file`.
    spec_files: Sequence[Path] = ()
    # Seconds of numerics per operator (the cases that do not fit the backend's measured speed are not run, and the
    # report says which: verify/time_budget.py). None: the default for the budget level and the device; 0: no cap.
    time_budget_s: float | None = None

    @property
    def files(self) -> tuple[Path, ...]:
        """Every spec file of the run, as the user gave them."""
        return tuple(self.spec_files) or (self.spec_file,)


def parse_stages(text: str) -> list[str]:
    """`--stages`: comma-separated registered stage names (numerics always runs); an unknown one is an input
    error listing what is registered."""
    from opgate.engine.stages import stage_names

    names = [name.strip() for name in text.split(",") if name.strip()]
    known = stage_names()
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise InputError(f"--stages {unknown[0] if unknown else text!r} is not a stage; choose from "
                         f"{', '.join(known)}")
    return list(dict.fromkeys(names))


def parse_sanitizer_tools(text: str) -> list[str]:
    """`--sanitizer-tools`: comma-separated tool names, or `all`; an unknown name is an input error."""
    from opgate.gpu.probes.sanitizer import TOOLS

    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["all"]:
        return list(TOOLS)
    unknown = [name for name in names if name not in TOOLS]
    if unknown or not names:
        raise InputError(f"--sanitizer-tools {unknown[0] if unknown else text!r}: not a compute-sanitizer tool; "
                         f"choose from {', '.join(TOOLS)} or all")
    return list(dict.fromkeys(names))


@dataclass
class Selection:
    op: Operator
    choices: list[ImplementationChoice]
    dtypes: list[str]
    cases: dict[str, list[Case]] = field(default_factory=dict)  # dtype -> cases to judge (replay: one)
    spec_file: Path = Path()  # the spec file that defines `op`, as the user gave it


def select(ops: Sequence[Operator], request: VerifyRequest, token: ReplayToken | None,
           shown: dict[Path, Path] | None = None) -> list[Selection]:
    """Apply --op/--impl/--dtype (or a replay token) to the spec files' operators; unknown names are input errors.
    `shown`: each operator's resolved spec file -> the path as the user gave it."""
    names = [token.op] if token else list(request.ops)
    by_name = {op.name: op for op in ops}
    where = (str(request.spec_file) if len(request.files) == 1
             else f"any of the {len(request.files)} spec files")
    # a replay token's names come from the report that printed it: the spec may have renamed them since
    said = (lambda option: f"the --replay token's {option.lstrip('-')}") if token else (lambda option: option)
    stale = (" (the token was printed for an older version of the spec: re-run verify without --replay for a new "
             "one)") if token else ""
    for name in names:
        if name not in by_name:
            raise InputError(f"{said('--op')} {name!r} is not defined in {where}; choose from: "
                             f"{', '.join(by_name)}{stale}")
    chosen_ops = [by_name[n] for n in names] if names else list(ops)
    wanted_impls = [token.impl] if token else list(request.impls)
    wanted_dtypes = [token.dtype] if token else list(request.dtypes)
    selections: list[Selection] = []
    all_impls: set[str] = set()
    for op in chosen_ops:
        if not token and not any(c.origin != "reference" for c in implementation_choices(op, False)):
            # opgate's own extras alone would pass it: nothing of the user's was checked
            raise InputError(f"operator {op.name!r} in {op.spec_file or request.spec_file} has no implementation; add "
                             f"one with @{op.name.split('.')[0]}.implementation(name, backend=...), or drop the "
                             "operator")
        extras = request.extras or bool(token) or any(
            c.name in wanted_impls for c in implementation_choices(op, True) if c.origin == "reference")
        choices = implementation_choices(op, extras)
        all_impls.update(c.name for c in choices)
        if wanted_impls:
            choices = [c for c in choices if c.name in wanted_impls]
        dtypes = list(op.dtypes)
        if wanted_dtypes:
            unknown = [d for d in wanted_dtypes if d not in op.dtypes]
            if unknown and (token or len(chosen_ops) == 1):
                raise InputError(f"{said('--dtype')} {unknown[0]!r} is not among operator {op.name!r}'s dtypes "
                                 f"({', '.join(op.dtypes)}); add it to the spec's dtypes or pick one of those{stale}")
            dtypes = [d for d in op.dtypes if d in wanted_dtypes]
        if choices and dtypes:
            spec_file = op.spec_file or request.spec_file
            selections.append(Selection(op, choices, dtypes,
                                        spec_file=(shown or {}).get(Path(spec_file), Path(spec_file))))
    missing = [i for i in wanted_impls if i not in all_impls]
    if missing:
        raise InputError(f"{said('--impl')} {missing[0]!r} is not an implementation of the selected operator(s); "
                         f"choose from: {', '.join(sorted(all_impls))}{stale}")
    if not selections:
        raise InputError("nothing to verify: the --op/--impl/--dtype filters leave no implementation x dtype")
    return selections


def _visible_gpus() -> tuple[int, list[str]]:
    """(how many GPUs torch sees, what CUDA_VISIBLE_DEVICES must say for each)."""
    import torch

    count = int(torch.cuda.device_count())
    parent = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return count, parent[:count] if len(parent) >= count else [str(i) for i in range(count)]


def _stage_of(task: CheckTask, gpu_stage_names: set[str]) -> str:
    """The GPU stage a task belongs to: the stage it was planned by, else its check id's last part (sanitizer
    tools are the sanitizer's)."""
    if task.stage:
        return task.stage if task.stage in gpu_stage_names else ""
    last = task.check_id.rsplit(".", 1)[-1].removesuffix("_warm_up")
    if last in ("racecheck", "initcheck", "synccheck"):
        return "sanitizer"
    return last if last in gpu_stage_names else ""


def fan_out_gpu_stages(tasks: list[CheckTask], gpu_stage_names: set[str], device_count: int,
                       visible_ids: Sequence[str]) -> list[CheckTask]:
    """On a host with 2 or more GPUs, pin each GPU stage task to one GPU (verify/gpu_fanout.py: device-local stages
    longest first on the least-loaded GPU), so the per-GPU queues run side by side; each pinned task gets its
    CUDA_VISIBLE_DEVICES and a warm-worker pool of its own GPU. One GPU: unchanged."""
    from opgate.verify.gpu_fanout import GpuStageTask, assign_gpu_stage_tasks

    staged = [(t, _stage_of(t, gpu_stage_names)) for t in tasks]
    gpu_tasks = [(t, stage) for t, stage in staged if stage]
    if device_count < 2 or not gpu_tasks:
        return tasks
    plan = assign_gpu_stage_tasks([GpuStageTask(t.check_id, stage, t.timeout_s) for t, stage in gpu_tasks],
                                  list(range(device_count)), list(visible_ids))
    position = {task_id: k for queue in plan.queues.values() for k, task_id in enumerate(queue)}
    pinned: dict[str, CheckTask] = {}
    for task, _ in gpu_tasks:
        device = plan.device_of(task.check_id)
        pinned[task.check_id] = dataclasses.replace(
            task, env={**task.env, **plan.env[task.check_id]}, device=device,
            worker=f"{task.worker}:gpu{device}" if task.worker else "")
    # Within each stage the GPU queues interleave (each queue's first task, then each one's second ...), so the
    # runner's first-come order starts one task per GPU side by side; the stages keep their order.
    order = {t.check_id: k for k, t in enumerate(tasks)}
    stage_start: dict[str, int] = {}
    for task, stage in gpu_tasks:
        stage_start.setdefault(stage, order[task.check_id])
    stage_of = dict((t.check_id, stage) for t, stage in gpu_tasks)

    def key(task: CheckTask) -> tuple[int, int, int]:
        if task.check_id not in pinned:
            return (order[task.check_id], -1, order[task.check_id])
        return (stage_start[stage_of[task.check_id]], position.get(task.check_id, 0), order[task.check_id])

    return sorted((pinned.get(t.check_id, t) for t in tasks), key=key)


def _start_cuda_quietly() -> None:
    """Ask torch for the GPUs once (cuInit, the device count), so the next ask is answered at once."""
    try:
        import torch

        torch.cuda.is_available()
    except Exception:  # _gpu_present asks again and meets it
        pass


def _gpu_present() -> bool:
    """Whether verify's GPU stages can run: torch's view, not gpu/probes/device.py's CuPy-based gate, because every
    verify check runs the user's implementations through torch (a torch-only host has no CuPy)."""
    import torch

    return bool(torch.cuda.is_available())


@dataclass
class PreparedRun:
    """What the parent has when the checks start: the tasks that need no calibration, the calibration thread
    that brings the others, and the results known up front."""

    tasks: list[CheckTask]
    preset: list[CheckResult]
    info: dict[str, Any]
    feed: TaskFeed
    calibrator: Calibrator
    task_keys: dict[str, tuple[int, int, int]]  # check id -> (stage order, operator, sequence): the report's order
    spec_of_op: dict[str, str]  # operator name -> its spec file as the user gave it (results name it: replays)
    settled_before: set[str] = field(default_factory=set)  # operators an earlier run settled (verify/resumed.py)
    settled_dtypes_before: dict[str, set[str]] = field(default_factory=dict)  # ... and operator x dtypes

    def finish(self, report: RunReport) -> RunReport:
        """The session's report with the calibration's results first and every check in stage order, each result
        naming the spec file of its operator (extra["spec_file"]: the replay command's file)."""
        from opgate.verify import compile_ahead

        keys = {**self.task_keys, **self.calibrator.task_keys}
        late = len(keys)
        checks = sorted((self._with_spec(r) for r in report.results if not _internal(r)),
                        key=lambda r: keys.get(r.check_id, (10**6, late, 0)))
        shown = {str(Path(spec).resolve()): spec for spec in self.spec_of_op.values()}
        engine = {**self.info["engine"], "calibration_spans_s": self.calibrator.spans,
                  # seconds after the checks began when each spec file was judged wholly (files complete one by
                  # one: CheckTask.group)
                  "files_completed_s": {shown.get(group, group): at for group, at in self.feed.completed.items()},
                  "calibration_phases_s": self.info.pop("calibration_phases_s", {}),
                  # what ranked the calibration pool's plans (verify/plan_order.py): op -> [estimate, its source]
                  "plan_estimates_s": self.info.pop("plan_estimates_s", {}),
                  # when the compile-ahead tasks were fed and the first of them (verify/compile_ahead.py)
                  "compile_ahead_queue": self.info.pop("compile_ahead_queue", {}),
                  # how the ready numerics checks were ordered (verify/check_seconds.py)
                  **({"numerics_order": self.calibrator.expectations.summary()}
                     if self.calibrator.expectations is not None else {}),
                  "bounds_cache": self.info.pop("bounds_cache", {"hit": 0, "computed": 0}),
                  "calibration_bounds_cache": self.info.pop("calibration_bounds_cache", {})}
        if any(r.check_id.endswith(compile_ahead.SUFFIX) for r in report.results):
            engine["compile_ahead"] = compile_ahead.summary(report.results)
        from opgate.verify.runtime import warm_up_summary

        warm_ups = warm_up_summary(report.results)  # runtime warm-ups: where their seconds went
        if warm_ups:
            engine["warm_ups"] = warm_ups
        extra = {**report.extra, **self.info, "engine": engine}
        calibrated = [self._with_spec(r) for r in list(self.calibrator.results)]  # a snapshot: after an interrupt
        preset = [self._with_spec(r) for r in self.preset]                         # the thread may still append
        return dataclasses.replace(report, results=tuple(calibrated) + tuple(preset) + tuple(checks), extra=extra)

    def complete_files(self, finished: Sequence[CheckResult], not_run: Sequence[str]) -> list[str]:
        """After an interrupt: the spec files (as given) whose every operator was calibrated and every task finished
        (verify/verdict_reuse.py stores their verdicts, so the next run judges only the rest). A task that had not run,
        or whose check id names no operator, leaves its file (or, unattributed, every file) incomplete."""
        calibrated = set(self.calibrator.operators_done)  # before the task ids: a done operator's tasks are in them
        expected = [*self.task_keys, *self.calibrator.task_keys.copy()]
        finished_ids = {result.check_id for result in finished}
        incomplete = {job.op.name for job in self.calibrator.jobs} - calibrated
        for check_id in {*not_run, *(i for i in expected if i not in finished_ids)}:
            op = self._operator_of_id(check_id)
            if op is None:
                return []
            incomplete.add(op)
        files: dict[str, set[str]] = {}
        for op, spec in self.spec_of_op.items():
            files.setdefault(spec, set()).add(op)
        return [spec for spec, ops in files.items() if not ops & incomplete]

    def settled_operators(self, results: Sequence[CheckResult]) -> list[str]:
        """The operators whose calibration and every check that needed it finished without an `error` (a later run
        need not calibrate them: verify/resumed.py), those an earlier run settled included."""
        done = set(self.calibrator.operators_done)  # before the task ids: a done operator's tasks are in them
        handed_over: dict[str | None, list[str]] = {}
        for check_id in list(self.calibrator.task_keys.copy()):
            handed_over.setdefault(self._operator_of_id(check_id), []).append(check_id)
        kept = {result.check_id for result in results if keepable(result)}
        settled = set(self.settled_before)
        for op in done:
            if f"verify.{op}.calibration" in kept and all(i in kept for i in handed_over.get(op, [])):
                settled.add(op)
        return sorted(settled)

    def settled_dtypes(self, results: Sequence[CheckResult]) -> dict[str, list[str]]:
        """Per operator, the dtypes whose plan was calibrated and every check handed over with it finished without
        an `error` (a later run need not calibrate them again: verify/resumed.py), those settled before included."""
        done = set(self.calibrator.plans_done)  # before the task ids: a done plan's tasks are in them
        handed_over: dict[tuple[str | None, str], list[str]] = {}
        for check_id, dtype in list(self.calibrator.task_dtypes.copy().items()):
            handed_over.setdefault((self._operator_of_id(check_id), dtype), []).append(check_id)
        kept = {result.check_id for result in results if keepable(result)}
        settled = {op: set(dtypes) for op, dtypes in self.settled_dtypes_before.items()}
        for op, dtype in done:
            if all(i in kept for i in handed_over.get((op, dtype), [])):
                settled.setdefault(op, set()).add(dtype)
        return {op: sorted(dtypes) for op, dtypes in sorted(settled.items()) if dtypes}

    def _operator_of_id(self, check_id: str) -> str | None:
        """The operator a check id names: the longest operator name it starts with (`verify.<op>.`)."""
        named = [name for name in self.spec_of_op if check_id.startswith(f"verify.{name}.")]
        return max(named, key=len) if named else None

    def _with_spec(self, result: CheckResult) -> CheckResult:
        op = result.extra.get("op") if isinstance(result.extra, dict) else None
        spec = self.spec_of_op.get(str(op)) if op is not None else None
        if spec is None:  # calibration and GPU-stage results: the longest operator name their id starts with
            named = self._operator_of_id(result.check_id)
            spec = self.spec_of_op[named] if named else None
        if spec is None or (isinstance(result.extra, dict) and "spec_file" in result.extra):
            return result
        return dataclasses.replace(result, extra={**(result.extra or {}), "spec_file": spec})


def _internal(result: CheckResult) -> bool:
    """A result the engine's own scheduling made (a runtime warm-up), not a verdict to report."""
    return isinstance(result.extra, dict) and bool(result.extra.get("internal"))


def _load_specs(request: VerifyRequest) -> tuple[list[Operator], dict[Path, Path]]:
    """Every spec file's operators (pre-flight imports in one isolated child, then here: specload.py) with their `<op>.grad` twins (verify/gradients.py), and each resolved spec path -> the path as
    given. torch is imported here while the child imports the specs. An operator name defined by two spec files
    is an input error: check ids, replay tokens and reports name operators, not files."""
    from opgate.engine.specload import (DEFAULT_IMPORT_TIMEOUT_S, import_spec_guarded, installed_imports,
                                        preflight_specs)

    # every file in one pre-flight child, in the order given (torch and the installed packages the specs import, here
    # meanwhile)
    meanwhile = ["torch", *(name for name in installed_imports(request.files) if name != "torch")]
    preflight_specs(request.files, request.timeout_s or DEFAULT_IMPORT_TIMEOUT_S, import_meanwhile=meanwhile)
    files = request.files
    ops: list[Operator] = []
    shown: dict[Path, Path] = {}
    defined_in: dict[str, Path] = {}
    for path in files:
        for op in with_gradient_operators(import_spec_guarded(path)):
            if op.name in defined_in:
                raise InputError(f"operator {op.name!r} is defined in both {defined_in[op.name]} and {path}; "
                                 "operator names must be unique in one run: rename one, or verify the files apart")
            defined_in[op.name] = path
            ops.append(op)
        shown[Path(path).resolve()] = Path(path)
    return ops, shown


def prepare_run(request: VerifyRequest, workdir: Path, pool: WarmPool | None = None,
                calibration_pool: CalibrationPool | None = None,
                resumed: ResumedChecks | None = None) -> PreparedRun:
    """Everything before the checks start: the spec, the selection, the tasks that need no calibration, and the
    calibration thread (not yet started) with the feed that will bring the numerics tasks. `resumed`: the stored
    results of checks an earlier run finished (verify/resumed.py), reported instead of run."""
    from opgate.verify import check_seconds, compile_ahead

    resumed = resumed if resumed is not None else ResumedChecks()
    t0 = time.perf_counter()
    library = len(request.files) > 1 or any(Path(f).is_dir() for f in request.files)
    token = ReplayToken.decode(request.replay) if request.replay else None
    budget_name = token.budget if token else request.budget
    budget_plan(budget_name)  # validates the name
    # the stages and the scheduling switches, checked before any work (a bad value: one line, exit 2)
    stages = chosen_stages(request)
    compile_ahead.slot_floor()
    compile_ahead.queue_order()
    process_count(APART_PROCESSES_ENV)
    if token:
        if len(request.files) > 1:
            raise InputError("--replay re-runs one case of one operator: give only the spec file that defines "
                             f"operator {token.op!r}, not {len(request.files)} files")
        request = dataclasses.replace(request, seed=token.plan_seed, shrink=False)
    # the CUDA driver's start-up (_gpu_present below) overlaps the spec load instead of following it
    threading.Thread(target=_start_cuda_quietly, daemon=True, name="opgate-cuda-init").start()
    ops, shown = _load_specs(request)
    spec_loaded = time.perf_counter()
    selections = select(ops, request, token, shown)
    gpu = _gpu_present()
    info: dict[str, Any] = {"budget": budget_name, "seed": request.seed, "spec": str(request.spec_file),
                            "gpu": gpu, "case_counts": {}, "replay": token.encode() if token else None}
    if len(request.files) > 1:
        info["specs"] = [str(path) for path in request.files]
    timeout = request.timeout_s or TIMEOUT_BY_BUDGET[budget_name]
    if pool is not None and token is None:
        _prestart_workers(pool, selections, request, gpu)
    unmet = {stage.name: stage.unmet(gpu) for stage in stages}
    # each numerics check's and runtime warm-up's seconds in earlier runs order them, longest first (none for a
    # replay: verify/check_seconds.py)
    history = {} if token else check_seconds.load()
    where = check_seconds.scope(budget_name, gpu)
    expectations = None if token else check_seconds.Expectations(history, where)
    warm_up_expectations = check_seconds.Expectations(history, where, warm_ups=True)
    at_once = [s for s in stages if not s.needs.calibration]
    calibrated = [s for s in stages if s.needs.calibration]
    per_dtype_only = all(s.per_dtype_plans for s in calibrated)
    keyed: list[tuple[tuple[int, int, int], CheckTask]] = []
    preset: list[CheckResult] = []
    jobs: list[CalibrationJob] = []
    ahead_of_job: dict[int, list[CheckTask]] = {}  # calibration job -> its compile-ahead tasks
    for op_index, sel in enumerate(selections):
        def make_plan(plans: dict[str, Path], sel: Selection = sel) -> OperatorPlan:
            return _operator_plan(sel, request, budget_name, gpu, workdir, timeout, plans, token is not None)

        items, stage_preset = stage_tasks(make_plan({}), at_once, unmet)
        items, stored = resumed.take(items)
        items = [(order, warm_up_expectations.applied(task)) for order, task in items]
        keyed += [((order, op_index, len(keyed) + k), task) for k, (order, task) in enumerate(items)]
        preset += stage_preset + stored
        if sel.op.name in resumed.settled:  # calibrated and judged before: its stored results stand for it
            preset += resumed.of_settled(sel.op.name, known={r.check_id for r in preset})
            if sel.op.name in resumed.case_counts:
                info["case_counts"][sel.op.name] = resumed.case_counts[sel.op.name]
            continue
        # the dtypes whose checks all finished before are not calibrated again (only where every stage that needs
        # the calibration takes one dtype's plan at a time: a per-operator stage needs them all)
        skip = resumed.skippable_dtypes(sel.op.name, sel.dtypes) if per_dtype_only else []
        if skip:
            stored_calibration = resumed.calibration_of(sel.op.name)
            preset += resumed.of_dtypes(sel.op.name, skip)
            jobs.append(CalibrationJob(sel.op, [d for d in sel.dtypes if d not in skip], make_plan, sel.spec_file,
                                       stored_calibration=stored_calibration))
        else:
            jobs.append(CalibrationJob(sel.op, list(sel.dtypes), make_plan, sel.spec_file))
        if token is None and compile_ahead.wanted(gpu, library):  # its kernels compiled while it calibrates
            ahead = compile_ahead.ahead_tasks(make_plan({}), len(jobs) - 1, jobs[-1].dtypes, budget_name,
                                              request.seed, workdir)
            if compile_ahead.in_file_order():
                keyed += [((task.order, op_index, len(keyed) + k), task) for k, task in enumerate(ahead)]
            else:  # the calibrator feeds them once it has ranked the plans, the latest plans' first
                ahead_of_job[len(jobs) - 1] = ahead
    tasks = queued(keyed)
    if gpu and token is None:
        tasks = fan_out_gpu_stages(tasks, {s.name for s in stages if s.needs.gpu}, *_visible_gpus())
        if os.environ.get("OPGATE_SANITIZER_RUNS", "shared") != "each":  # "each": one child per check, as before
            from opgate.verify.sanitizer_batch import group_sanitizer_tasks

            tasks = group_sanitizer_tasks(tasks, workdir)
    feed = TaskFeed(upcoming_order=min((s.order for s in calibrated), default=0),
                    groups={str(job.spec_file.resolve()) for job in jobs})  # OperatorPlan.spec_file's
    plans = sum(len(job.dtypes) for job in jobs)
    calibrator = Calibrator(jobs, calibrated, unmet, feed, budget_name, request.seed, workdir, token, info,
                            pool=calibration_pool if plans > 1 else None, resumed=resumed, ahead=ahead_of_job,
                            expectations=expectations)
    info["engine"] = {"jobs": request.jobs, "warm_workers": True, "stages": [s.name for s in stages],
                      "spec_load_s": round(spec_loaded - t0, 2),
                      "prepare_s": round(time.perf_counter() - t0, 2),
                      **({"warm_up_order": warm_up_expectations.summary()}
                         if any(warm_up_expectations.applies_to(t) for t in tasks) else {})}
    spec_of_op = {sel.op.name: str(sel.spec_file) for sel in selections}
    names = {sel.op.name for sel in selections}
    return PreparedRun(tasks, preset, info, feed, calibrator, {t.check_id: key for key, t in keyed}, spec_of_op,
                       settled_before=names & resumed.settled,
                       settled_dtypes_before={op: set(d) for op, d in resumed.settled_dtypes.items() if op in names})


def queued(keyed: Sequence[tuple[tuple[int, int, int], CheckTask]]) -> list[CheckTask]:
    """The tasks that need no calibration as the run queues them: by stage order, within an order longest expected
    first where earlier runs' seconds are known (the runtime warm-ups: verify/check_seconds.py), each weighed with the
    tasks that start after it (check_seconds.chained_seconds) and `ranked` where that is long; else in the operators'
    order (the report's order, `keyed`'s keys, stays that)."""
    from opgate.verify import check_seconds

    chained = check_seconds.chained_seconds(task for _, task in keyed)
    ordered = [task for _, task in sorted(keyed, key=lambda entry: (entry[0][0], -chained[entry[1].check_id],
                                                                    *entry[0][1:]))]
    return [dataclasses.replace(task, ranked=True)
            if not task.ranked and chained[task.check_id] >= check_seconds.LONG_CHECK_S else task for task in ordered]


def _bytecode_folder(run_folder: Path) -> Path:
    """Where the run's processes share compiled bytecode (engine/bytecode.py): opgate's cache folder, so a later run
    starts warm, also with --no-cache (bytecode judges nothing: --no-cache judges everything again, it need not
    compile torch from source again in every process); the run's own temporary folder where that folder cannot be
    made (a read-only home)."""
    from opgate.engine.bytecode import FOLDER
    from opgate.verify.bounds_cache import cache_folder

    folder = cache_folder() / FOLDER
    existing = next(p for p in (folder, *folder.parents) if p.exists())  # made only if used (shared_bytecode)
    return folder if existing.is_dir() and os.access(existing, os.W_OK) else run_folder / FOLDER


def _bound_terms_may_use_gpu() -> bool:
    """Whether the calibration's bound terms may run on a GPU (verify/bounds_device.py), asked before the spec is
    read: NVML sees one and OPGATE_BOUNDS_DEVICE does not keep them on the CPU."""
    from opgate.gpu.probes.device import gpu_available
    from opgate.verify.bounds_device import DEVICE_ENV

    return os.environ.get(DEVICE_ENV, "auto").strip().lower() != "cpu" and gpu_available(runtime=False)


def _start_spare_workers(pool: WarmPool, request: VerifyRequest) -> None:
    """On a GPU host, start warm workers before the spec is read (imports, a CUDA context), each adopted later by
    an implementation whose environment matches (most backends add nothing to it on a GPU): the runtime checks then
    start seconds earlier. Without a GPU (NVML's word: no CUDA context here) the prestarted workers of
    _prestart_workers already overlap the calibration."""
    from opgate.gpu.probes.device import gpu_available

    if not gpu_available(runtime=False):
        return
    env = child_env({}, request.jobs, gpu=True)
    for _ in range(spare_worker_count(request.jobs)):
        pool.start_spare(CheckTask("verify.spare_warm_up", "spare warm-up",
                                   "opgate.verify.warm_up:SpareWarmUpCheck", 600.0, CheckContext(verb="verify"),
                                   env=env, uses_gpu=True))  # a CUDA context: under the GPU guard


def spare_worker_count(jobs: int) -> int:
    """How many spare warm workers a GPU run starts: one per job up to SPARE_WORKERS_MAX, or OPGATE_SPARE_WORKERS."""
    override = os.environ.get(SPARE_WORKERS_ENV, "").strip()
    return int(override) if override.isdigit() else min(jobs, SPARE_WORKERS_MAX)


def _prestart_workers(pool: WarmPool, selections: Sequence[Selection], request: VerifyRequest, gpu: bool) -> None:
    """Start up to --jobs warm workers now, so their imports, the spec load and the backends' own warm-up (e.g.
    torch.compile's) overlap the calibration instead of following it: first one per implementation (the
    slowest-starting backends first, then the user's GPU implementations), then one per dtype of each,
    slowest-starting first (their numerics checks start together as soon as a dtype is calibrated), and one
    more for each implementation of the GPU stages (the recovery check retires its worker unless it passed)."""
    from opgate.verify.backends import backend

    # (rank, key, env, backend, count, spec file)
    wanted: list[tuple[tuple[float, bool], str, dict[str, str], str, int, str]] = []
    for sel in selections:
        for choice in sel.choices:
            chosen = backend(choice.backend)
            if chosen.unavailable_reason():  # TVM absent: no worker
                continue
            env = child_env(chosen.child_env(gpu), request.jobs, gpu)
            spec = str(sel.spec_file.resolve())
            key = OperatorPlan.worker_key_for(Path(spec), sel.op.name, choice.name, env)
            on_gpu = gpu and choice.origin == "user" and chosen.gpu_stages
            wanted.append(((chosen.startup_s, on_gpu), key, env, choice.backend, len(sel.dtypes) + int(on_gpu),
                           spec))
    wanted.sort(key=lambda entry: entry[0], reverse=True)
    order = [(key, env, name, spec) for _, key, env, name, _, spec in wanted]
    for _, key, env, name, count, spec in wanted:
        order += [(key, env, name, spec)] * (count - 1)
    for key, env, name, spec in order[:request.jobs]:
        pool.prestart(CheckTask("verify.warm_up", "warm-up", "opgate.verify.warm_up:WarmUpCheck", 600.0,
                                CheckContext(verb="verify", options={"spec_file": spec, "backend": name}),
                                env=env, worker=key, uses_gpu=gpu))


def gpu_stage_tasks(sel: Selection, request: VerifyRequest, workdir: Path, gpu: bool = True,
                    ) -> tuple[list[CheckTask], list[CheckResult]]:
    """The tasks of the request's stages other than numerics for one selection (no calibration needed)."""
    stages = [s for s in chosen_stages(request) if s.name != "numerics"]
    plan = _operator_plan(sel, request, request.budget, gpu, workdir, TIMEOUT_BY_BUDGET[request.budget], {},
                          False)
    items, preset = stage_tasks(plan, stages, {s.name: s.unmet(gpu) for s in stages})
    return [task for _, task in sorted(items, key=lambda item: item[0])], preset


def chosen_stages(request: VerifyRequest) -> list[Stage]:
    """The registered stages the request names, numerics always first; InputError for an unknown name."""
    from opgate.engine.stages import discover_stages

    registry = discover_stages()
    names = ["numerics", *[n for n in request.stages if n != "numerics"]]
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise InputError(f"--stages {unknown[0]!r} is not a stage; choose from {', '.join(registry)}")
    for name in names:
        registry[name].check_settings()
    return [registry[n] for n in names]


def child_env(backend_env: dict[str, str], jobs: int, gpu: bool = False) -> dict[str, str]:
    """The environment every verify child of one implementation starts with (`gpu`: the run uses a GPU)."""
    from opgate.gpu import cuda_wait

    # a child waiting for the GPU sleeps instead of spinning a core the compiles need (gpu/cuda_wait.py)
    waiting = {cuda_wait.ENV: os.environ.get(cuda_wait.ENV, "block")} if gpu else {}
    return {
        # Children share the cores: one intra-op thread pool per child, sized to its share.
        "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // max(1, jobs))),
        # Inductor's parallel compile pool costs seconds to start and competes with sibling children.
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
        "TRITON_DEFAULT_FP_FUSION": os.environ.get("TRITON_DEFAULT_FP_FUSION", "1"),
        # Autotuning results on disk (Triton's knobs.autotuning.cache, keyed by the kernel's source, the configs,
        # the tuning key and the target): the workers of one spec file, the runtime check after its warm-up, and a
        # re-run reuse a kernel's tuning instead of benchmarking every config again in each process.
        "TRITON_CACHE_AUTOTUNING": os.environ.get("TRITON_CACHE_AUTOTUNING", "1"),
        # The numerics check turns on torch's deterministic mode (so torch.empty() is NaN-poisoned); cuBLAS
        # needs a fixed workspace for that (PyTorch's reproducibility notes), else every GEMM warns.
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ":4096:8"),
        **waiting,
        **backend_env,  # e.g. TRITON_INTERPRET=1 for Triton without a GPU (read when triton is imported)
    }


def _operator_plan(sel: Selection, request: VerifyRequest, budget_name: str, gpu: bool, workdir: Path,
                   timeout: float, plans: dict[str, Path], replaying: bool) -> OperatorPlan:
    from opgate.verify.backends import backend

    envs = {c.name: child_env(backend(c.backend).child_env(gpu), request.jobs, gpu) for c in sel.choices}
    gpu_choices = [c for c in sel.choices if c.origin == "user" and backend(c.backend).gpu_stages]
    return OperatorPlan(
        op=sel.op, choices=list(sel.choices), dtypes=list(sel.dtypes), spec_file=sel.spec_file.resolve(),
        budget=budget_name, seed=request.seed, gpu=gpu, jobs=request.jobs, workdir=workdir, out_dir=request.out_dir,
        timeout_s=timeout, replaying=replaying, plans=plans, child_envs=envs, gpu_choices=gpu_choices,
        options=StageOptions(extras=request.extras or replaying or any(c.origin == "reference" for c in sel.choices),
                             shrink=request.shrink,
                             case_timeout_s=request.case_timeout_s, time_budget_s=request.time_budget_s,
                             sanitizer_tools=tuple(request.sanitizer_tools) or StageOptions().sanitizer_tools))


def run_verify(request: VerifyRequest, console: Any) -> RunReport:
    """Judge the spec files that changed since their verdicts were stored (all of them when the verdict cache is
    off: verify/verdict_cache.py), reuse the stored verdicts of the others, and store what was wholly judged."""
    from opgate.verify.verdict_cache import VerdictCache

    cache = VerdictCache.for_request(request)
    if cache is None:
        return _judge(request, console)
    from opgate.verify import verdict_reuse

    return verdict_reuse.run_with_cache(request, console, cache, _judge)


@dataclass
class JudgedSoFar:
    """The run's report once its checks have ended, and once it was finished: what _judge keeps where an interrupt
    comes after every check, while the run closes its workers."""

    ended: RunReport | None = None
    finished: RunReport | None = None


def _judge(request: VerifyRequest, console: Any, resumed: ResumedChecks | None = None,
           keep: Callable[[RunReport], RunReport] | None = None) -> RunReport:
    """_judge_checks, and a report even where an interrupt (SIGTERM, --time-limit) comes after every check has ended,
    while the run closes its workers and finishes the report: that interrupt lost the whole report once (a run
    with measurement windows on the H200 ended its 84 checks and met its --time-limit while it closed: "interrupted
    before any check finished", no report; thirty-fifth session). Where it is the run's own --time-limit and the
    report was finished, the run judged everything in time: its report is complete, not interrupted
    (_finished_before_the_limit)."""
    from opgate.engine.interrupts import RunInterrupted, time_limit_reached

    judged = JudgedSoFar()
    try:
        report = _judge_checks(request, console, resumed, keep, judged)
        _keep_check_seconds(report)
        return report
    except KeyboardInterrupt as stop:
        if isinstance(stop, RunInterrupted) or judged.ended is None:
            raise
        if judged.finished is not None and time_limit_reached() is not None:
            return _finished_before_the_limit(judged.finished, console)
        report = judged.finished or judged.ended
        report = dataclasses.replace(report, extra={**report.extra, "interrupted": True, "not_run": []})
        _stop_with(report, keep, list(report.results), [])


def _finished_before_the_limit(report: RunReport, console: Any) -> RunReport:
    """The finished report of a run whose --time-limit came while it closed its workers: every check had ended and
    the report was complete, so it stands as the run's verdict (its exit code the verdicts', its files stored whole),
    not as an interrupted run's (exit 3 where nothing failed, its files kept in part). An H100 library run ended
    its 986 tasks 1-2 s before its limit and was reported interrupted (fifty-sixth session). The children the
    closing had not stopped yet are stopped here."""
    from opgate.engine.children import kill_all_children
    from opgate.engine.interrupts import time_limit_reached

    kill_all_children()
    limit = time_limit_reached()
    console.print(f"opgate: --time-limit {limit:g} s came while the run closed its workers, after every check had "
                  "ended: the report is complete", highlight=False)
    report = dataclasses.replace(report, extra={**report.extra, "time_limit_met_while_closing_s": limit})
    _keep_check_seconds(report)
    return report


def _stop_with(report: RunReport, keep: Callable[[RunReport], RunReport] | None, results: list[CheckResult],
               not_run: list[str]) -> NoReturn:
    """End an interrupted run: its report says why it stopped (--time-limit), is written to the planned files and
    kept in the verdict cache before any child is reaped (that can outlast a CI runner's SIGTERM-to-SIGKILL grace)."""
    from opgate.engine.interrupts import RunInterrupted, time_limit_reached
    from opgate.reporting.emit import emit_interrupted

    if time_limit_reached() is not None:  # --time-limit: why the run stopped
        report = dataclasses.replace(report, extra={**report.extra, "time_limit_s": time_limit_reached()})
    emit_interrupted(report)
    if keep is not None:  # what was judged is stored at once (verify/verdict_reuse.py)
        report = keep(report)
    _keep_check_seconds(report)
    raise RunInterrupted(results, not_run, report=report) from None


def _keep_check_seconds(report: RunReport) -> None:
    """The numerics checks' and runtime warm-ups' seconds of this run, for the next one's order
    (verify/check_seconds.py); none of a replay (its report names the token), which runs one case."""
    from opgate.verify import check_seconds

    extra = report.extra or {}
    if extra.get("replay"):
        return
    check_seconds.record(report.results, check_seconds.scope(str(extra.get("budget")), bool(extra.get("gpu"))),
                         timeline=extra.get("timeline"))


def _judge_checks(request: VerifyRequest, console: Any, resumed: ResumedChecks | None,
                  keep: Callable[[RunReport], RunReport] | None, judged: JudgedSoFar) -> RunReport:
    """Load the spec and start the checks that need no calibration; calibrate in a thread meanwhile, each dtype's
    numerics checks joining the run as soon as its plan is written; whole-spec stages (opgate analyze's) after."""
    from opgate.engine.interrupts import RunInterrupted
    from opgate.engine.session import run_session

    from opgate.engine.children import become_subreaper, start_afresh

    start_afresh()  # a run in this process after an interrupted one (tests, the pytest plugin)
    become_subreaper()  # a process a check starts that leaves its group and outlives it is re-parented here
    from opgate.engine.bytecode import shared_bytecode

    from opgate.engine.workdirs import owned_workdir, process_age_s

    with owned_workdir("opgate-verify-") as workdir, shared_bytecode(_bytecode_folder(workdir)) as bytecode:
        (workdir / "workers").mkdir()
        pool = WarmPool(workdir / "workers", warm_worker_limit(request.jobs))
        prepared: PreparedRun | None = None
        interrupted = False
        # processes that calibrate operators x dtypes side by side on hosts with many cores, started now so their
        # imports overlap the spec load (at most one per operator x dtype: a bound refined once the specs are read)
        library = len(request.files) > 1 or any(Path(f).is_dir() for f in request.files)
        processes = 0 if request.replay else calibration_processes(1 << 16, library)
        calibration_pool = CalibrationPool(processes, warm_gpu=_bound_terms_may_use_gpu()) if processes else None
        from opgate.verify import empty_probe

        try:
            # its imports overlap the spec load where cores are spare; on CI's 2 it is one more process importing torch
            # beside every run's own start-up: a fresh clone's pytest took 713 s with it, 627 s without, 623 s at
            # the session's start (docs/benchmarks.md, make test)
            calibrating = any(stage.needs.calibration for stage in chosen_stages(request))
            if not request.replay and not library and calibrating and (os.cpu_count() or 1) >= 8:
                empty_probe.prestart(Path(request.files[0]))
            if not request.replay:
                _start_spare_workers(pool, request)
            if console.is_terminal:
                with console.status("loading the spec"):
                    prepared = prepare_run(request, workdir, pool, calibration_pool, resumed)
            else:
                prepared = prepare_run(request, workdir, pool, calibration_pool, resumed)
            prepared.info["engine"]["bytecode"] = bytecode
            # the process's age when the checks start: its interpreter, imports and spec load (engine/workdirs.py)
            prepared.info["engine"]["process_age_at_checks_s"] = process_age_s()
            prepared.calibrator.start()
            follow_ups = NotedFollowUps()  # the tasks run again, and why: in the report as the run goes
            prepared.info["engine"]["run_again"] = follow_ups.run_again
            try:
                report = run_session("verify", prepared.tasks, console, jobs=request.jobs, extra={},
                                     follow_up=follow_ups, pool=pool, feed=prepared.feed)
                judged.ended = report
            except RunInterrupted as stop:  # the report so far keeps the calibration results that were in
                interrupted = True
                report = _with_worker_stats(prepared.finish(stop.report), pool)
                whole_run = any(stage.whole_run_group for stage in chosen_stages(request))  # not run: incomplete
                complete = [] if whole_run else prepared.complete_files(stop.results, stop.not_run)
                settled = [] if whole_run else prepared.settled_operators(report.results)
                report = dataclasses.replace(report, extra={
                    **report.extra, "complete_files": complete, "settled_operators": settled,
                    "settled_dtypes": {} if whole_run else prepared.settled_dtypes(report.results)})
                # on disk before any child is reaped: the cleanup below can outlast a SIGTERM-to-SIGKILL grace (on
                # the H200 host a library run was killed 5 s after its SIGTERM)
                _stop_with(report, keep, stop.results, stop.not_run)
            prepared.calibrator.join()
            report = _with_worker_stats(prepared.finish(report), pool)
            if not any(stage.whole_run_group for stage in chosen_stages(request)):
                report = dataclasses.replace(report, extra={
                    **report.extra, "settled_operators": prepared.settled_operators(report.results),
                    "settled_dtypes": prepared.settled_dtypes(report.results)})
            judged.finished = report
        finally:
            if interrupted:  # the empty-case probes' children first: their threads are joined at exit
                from opgate.engine.children import kill_all_children

                kill_all_children()
            if prepared is not None:
                prepared.calibrator.stopped.set()
                # interrupted: a moment to leave the work folder; a calibration in this thread sees `stopped` only
                # between dtypes, and waiting longer delayed the report past a CI runner's SIGTERM-to-SIGKILL grace
                if prepared.calibrator.is_alive():
                    prepared.calibrator.join(timeout=0.5)
            closing = time.perf_counter()
            empty_probe.discard_prestarted()
            if calibration_pool is not None:
                calibration_pool.close()
            pool.close(grace_s=0.0 if interrupted else 10.0)
            if interrupted:  # nothing a check started outlives the run, reported or not
                from opgate.engine.children import end_processes, escaped_processes

                end_processes(escaped_processes())
        engine = {**report.extra.get("engine", {}), "workers_close_s": round(time.perf_counter() - closing, 2),
                  "process_age_at_end_s": process_age_s()}
        report = dataclasses.replace(report, extra={**report.extra, "engine": engine})
        report = _with_escaped_processes(report)
    if not request.replay:
        report = _with_whole_run_stages(report, request, console)
    return report


def _with_worker_stats(report: RunReport, pool: WarmPool) -> RunReport:
    """The report with the warm pool's worker starts and ends (extra.engine.warm_workers) and its measurement
    windows (extra.engine.measurement_windows, where one was asked for)."""
    engine = {**report.extra.get("engine", {}), "warm_workers": pool.stats()}
    if pool.measurement_windows.get("asked"):  # engine/gpu_windows.py: measurements run while the others waited
        engine["measurement_windows"] = dict(pool.measurement_windows)
    return dataclasses.replace(report, extra={**report.extra, "engine": engine})


LEAKED_CHECK_ID = "verify.leaked_processes"


def _with_escaped_processes(report: RunReport) -> RunReport:
    """End every process a check started that outlived the run (it left its killed process group with setsid and
    was re-parented to opgate, a child subreaper), and report it: a FAIL naming the process and the check."""
    from opgate.engine.worker import CHECK_ENV
    from opgate.engine.children import end_processes, escaped_processes

    from opgate.probes.processes import MPS_PROCESS_NAMES

    found = escaped_processes(CHECK_ENV)
    end_processes(found)
    # the qos stage's own MPS daemon (started and quit by opgate) is opgate's to clean up, not the operator's fault
    own = [p for p in found if Path(p.command.split(" ")[0]).name in MPS_PROCESS_NAMES]
    escaped = [p for p in found if p not in own]
    if own:
        report = dataclasses.replace(report, extra={**report.extra, "ended_own_processes": [
            {"pid": p.pid, "command": p.command} for p in own]})
    if not escaped:
        return report
    named = "; ".join(f"pid {p.pid} ({p.command or '?'})" + (f", started during {p.started_by}" if p.started_by else "")
                      for p in escaped[:5])
    result = CheckResult(
        LEAKED_CHECK_ID, "no process outlives its check", Outcome.FAILED,
        f"{len(escaped)} process(es) started by the checks were still running after the run, outside the process "
        f"groups opgate kills (a setsid or a daemon's double fork): {named}; opgate killed them",
        remediation="An operator's code must not leave processes behind: join or terminate what it starts (a "
                    "daemon, a server, a multiprocessing pool) before it returns, or keep it in its process group.",
        extra={"escaped": [{"pid": p.pid, "command": p.command, "started_by": p.started_by} for p in escaped],
               "failure_class": "leaked_process"})
    return dataclasses.replace(report, results=(*report.results, result))


def _with_whole_run_stages(report: RunReport, request: VerifyRequest, console: Any) -> RunReport:
    """Stages that run once over the whole spec (e.g. `--stages portability,occupancy,roofline`, opgate
    analyze's through the plugin registry): each group once, its results joined into this report."""
    groups: dict[str, list[Stage]] = {}
    for stage in chosen_stages(request):
        if stage.whole_run_group:
            groups.setdefault(stage.whole_run_group, []).append(stage)
    for group, members in groups.items():
        for spec_file in request.files:  # once per spec file: each is its own analyze run
            whole = members[0].run_whole(Path(spec_file).resolve(), [m.name for m in members], request, console)
            extra = whole.extra if len(request.files) == 1 else {
                **report.extra.get(group, {}), str(spec_file): whole.extra}
            report = dataclasses.replace(report, results=report.results + whole.results,
                                         duration_s=report.duration_s + whole.duration_s,
                                         extra={**report.extra, group: extra})
    return report
