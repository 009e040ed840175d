"""`opgate verify` in the parent process: select, plan, calibrate, fan out, collect.

1. Load the spec file and pick the operators, implementations and dtypes asked for.
2. Per op x dtype: plan the cases, compute the float64 truth and the eager baseline once (here, on the
   CPU), calibrate the budget, and write it all to a plan file.
3. Every chosen stage (a plugin: opgate/stage_api.py, the shipped ones in verify/builtin_stages.py) turns
   each op's plan into check tasks; a stage whose needs are not met here (no GPU, no compute-sanitizer) is
   one `skipped` line. The runner (opgate.runner) runs them in warm workers, one pool per implementation:
   a crash or hang is an `error` (or, for a case, a FAIL: resume.py) of that check only.
4. Return a RunReport: one calibration result per op, one result per check; whole-spec stages
   (`opgate analyze`'s, through the same registry) join theirs.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from opgate.errors import InputError
from opgate.results import CheckResult, Figure, Outcome, RunReport, Threshold
from opgate.checks.base import CheckContext
from opgate.runner import CheckTask, WarmPool, warm_worker_limit
from opgate.stage_api import OperatorPlan, Stage
from opgate.verify.backends.base import ImplementationChoice, implementation_choices
from opgate.verify.calibrate import (
    FLOOR_EPS, K_RMSE, Calibration, CalibrationError, budgets_for_case, calibrate, truth_and_baseline,
)
from opgate.verify.gradients import with_gradient_operators
from opgate.verify.inputs import Case, budget_plan, inputs_generated_once, plan_cases
from opgate.verify.planfile import PlanFile
from opgate.verify.replay import ReplayToken
from opgate.verify.resume import follow_up as resume_after_crash
from opgate.core.spec import Operator

CHECK_TARGET = "opgate.verify.check:VerifyImplementationCheck"  # the numerics check (resume.py reads it)
# Seconds one implementation x dtype may take (all its cases, shrinking included) before it is killed.
TIMEOUT_BY_BUDGET = {"quick": 300.0, "standard": 600.0, "thorough": 1800.0}


@dataclass(frozen=True)
class VerifyRequest:
    spec_file: Path
    ops: Sequence[str] = ()
    impls: Sequence[str] = ()
    dtypes: Sequence[str] = ()
    seed: int = 0
    budget: str = "standard"
    replay: str | None = None
    out_dir: Path = Path("opgate-report")
    extras: bool = True
    shrink: bool = True
    jobs: int = 2  # the CLI's default is default_jobs()
    timeout_s: float | None = None
    # numerics always; runtime (timing, roofline fraction, CUDA graphs), sanitizer and recovery on a GPU;
    # ncu and portability / occupancy / roofline (`opgate analyze`'s stages) on request.
    stages: Sequence[str] = ("numerics", "runtime", "sanitizer", "recovery")
    # compute-sanitizer tools the sanitizer stage runs, one check each (memcheck's id ends in `.sanitizer`,
    # the others in `.racecheck` / `.initcheck` / `.synccheck`). All four by default: on the H200 each
    # adds 5-11 s per implementation and they run side by side (docs/benchmarks.md).
    sanitizer_tools: Sequence[str] = ("memcheck", "racecheck", "initcheck", "synccheck")
    # Seconds one call of the implementation on one case may run before it counts as a hang (a `crash` of that
    # case; the other cases still run). None: resume.CASE_TIMEOUT_S; at most 90% of timeout_s.
    case_timeout_s: float | None = None


def parse_stages(text: str) -> list[str]:
    """`--stages`: comma-separated registered stage names (numerics always runs); an unknown one is an input
    error listing what is registered."""
    from opgate.stage_api import stage_names

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


def select(ops: Sequence[Operator], request: VerifyRequest, token: ReplayToken | None) -> list[Selection]:
    """Apply --op/--impl/--dtype (or a replay token) to the spec; unknown names are input errors."""
    names = [token.op] if token else list(request.ops)
    by_name = {op.name: op for op in ops}
    for name in names:
        if name not in by_name:
            raise InputError(f"--op {name!r} is not defined in {request.spec_file}; choose from: {', '.join(by_name)}")
    chosen_ops = [by_name[n] for n in names] if names else list(ops)
    wanted_impls = [token.impl] if token else list(request.impls)
    wanted_dtypes = [token.dtype] if token else list(request.dtypes)
    selections: list[Selection] = []
    all_impls: set[str] = set()
    for op in chosen_ops:
        choices = implementation_choices(op, request.extras or bool(token))
        all_impls.update(c.name for c in choices)
        if wanted_impls:
            choices = [c for c in choices if c.name in wanted_impls]
        dtypes = list(op.dtypes)
        if wanted_dtypes:
            unknown = [d for d in wanted_dtypes if d not in op.dtypes]
            if unknown and (token or len(chosen_ops) == 1):
                raise InputError(f"--dtype {unknown[0]!r} is not among operator {op.name!r}'s dtypes "
                                 f"({', '.join(op.dtypes)}); add it to the spec's dtypes or pick one of those")
            dtypes = [d for d in op.dtypes if d in wanted_dtypes]
        if choices and dtypes:
            selections.append(Selection(op, choices, dtypes))
    missing = [i for i in wanted_impls if i not in all_impls]
    if missing:
        raise InputError(f"--impl {missing[0]!r} is not an implementation of the selected operator(s); "
                         f"choose from: {', '.join(sorted(all_impls))}")
    if not selections:
        raise InputError("nothing to verify: the --op/--impl/--dtype filters leave no implementation x dtype")
    return selections


def _calibration_result(op: Operator, calibrations: dict[str, Calibration], errors: dict[str, str],
                        budget: str, seed: int, duration: float) -> CheckResult:
    figures: list[Figure] = []
    for dtype, cal in calibrations.items():
        for o, out_dtype in enumerate(cal.out_dtypes):
            label = dtype if len(cal.out_dtypes) == 1 else f"{dtype} out{o}"
            figures.append(Figure(f"{label}: eager baseline RMSE / RMS(truth), median", cal.pooled_rmse[o], "",
                                  Threshold(f"x{K_RMSE:g} + {FLOOR_EPS.get(out_dtype, 1.0):g} eps", "<=",
                                            f"calibrated over {cal.n_cases} cases; candidates get "
                                            f"{K_RMSE:g} x max(baseline here, this median) + floor")))
            figures.append(Figure(f"{label}: eager baseline p99.9 |error| / p99.9 |truth|, median",
                                  cal.pooled_quantile[o]))
        if cal.override:
            figures.append(Figure(f"{dtype}: user tolerance", f"atol {cal.override['atol']:g}, "
                                                             f"rtol {cal.override['rtol']:g}"))
    extra = {"budget": budget, "seed": seed,
             "calibrations": {d: c.summary() for d, c in calibrations.items()}, "errors": errors}
    if errors:
        first = next(iter(errors.values()))
        outcome, reason = Outcome.ERROR, f"the reference could not be evaluated: {first}"
        remediation = "fix the reference (it defines the operator's meaning) or the dims/dtypes it is given"
    else:
        n = next(iter(calibrations.values())).n_cases if calibrations else 0
        outcome = Outcome.PASSED
        reason = (f"budgets calibrated from PyTorch eager vs float64 over {n} cases for "
                  f"{', '.join(calibrations)} ({budget} budget, seed {seed})")
        remediation = ""
    return CheckResult(f"verify.{op.name}.calibration", f"{op.name}: calibrated error budgets", outcome, reason,
                       tuple(figures), remediation, duration, extra)


def _replay_plan(op: Operator, dtype: str, request: VerifyRequest, cal: Calibration, case: Case,
                 budget_name: str) -> PlanFile:
    """A plan of one case (from a replay token) judged with the full plan's pooled calibration."""
    truth, baseline = truth_and_baseline(op, case, dtype)
    budgets, masks, out_dtypes = budgets_for_case(op, dtype, case, truth, baseline, cal.pooled_rmse,
                                                  cal.pooled_quantile, cal.n_cases)
    return PlanFile(op.name, dtype, budget_name, request.seed, [case], [truth], [budgets], [masks], out_dtypes,
                    cal.pooled_rmse, cal.pooled_quantile, cal.n_cases, cal.summary())


def _without_fatal_empty_cases(spec_file: Path, op: Operator, cases: list[Case], dtype: str,
                               info: dict[str, Any]) -> list[Case]:
    """Drop opgate-added empty cases whose reference kills a process (tried in a child: empty_probe.py)."""
    from opgate.verify.empty_probe import surviving_cases

    empty = [c for c in cases if _is_added_empty_case(c)]
    if not empty:
        return cases
    survived = surviving_cases(spec_file.resolve(), op.name, dtype, empty)
    fatal = [c for i, c in enumerate(empty) if i not in survived]
    if fatal:
        info.setdefault("fatal_empty_cases", {})[op.name] = [c.label() for c in fatal]
    return [c for c in cases if c not in fatal]


def _is_added_empty_case(case: Case) -> bool:
    """A size-0 case opgate added (not one the spec declared)."""
    return case.origin != "declared" and any(size == 0 for _, size in case.dims)


def _visible_gpus() -> tuple[int, list[str]]:
    """(how many GPUs torch sees, what CUDA_VISIBLE_DEVICES must say for each)."""
    import torch

    count = int(torch.cuda.device_count())
    parent = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return count, parent[:count] if len(parent) >= count else [str(i) for i in range(count)]


def _stage_of(task: CheckTask, gpu_stage_names: set[str]) -> str:
    """The GPU stage a task belongs to, from its check id's last part (sanitizer tools are the sanitizer's)."""
    last = task.check_id.rsplit(".", 1)[-1]
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


def _gpu_present() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def prepare_tasks(request: VerifyRequest, workdir: Path, status: Any = None,
                  pool: WarmPool | None = None) -> tuple[list[CheckTask], list[CheckResult], dict[str, Any]]:
    """Everything before the children start: selection, plans, truth, calibration, tasks."""
    token = ReplayToken.decode(request.replay) if request.replay else None
    budget_name = token.budget if token else request.budget
    budget_plan(budget_name)  # validates the name
    if token:
        request = dataclasses.replace(request, seed=token.plan_seed, shrink=False)
    from opgate.specload import load_spec_isolated
    from opgate.verify.memory_guard import refuse_oversized_cases

    # <op>.grad twins of operators with requires_grad inputs (verify/gradients.py)
    ops = with_gradient_operators(load_spec_isolated(request.spec_file, request.timeout_s))
    selections = select(ops, request, token)
    gpu = _gpu_present()
    tasks: list[CheckTask] = []
    preset: list[CheckResult] = []
    info: dict[str, Any] = {"budget": budget_name, "seed": request.seed, "spec": str(request.spec_file),
                            "gpu": gpu, "case_counts": {}, "replay": token.encode() if token else None}
    timeout = request.timeout_s or TIMEOUT_BY_BUDGET[budget_name]
    started = time.perf_counter()
    if pool is not None and token is None:
        _prestart_workers(pool, selections, request, gpu)
    stages = chosen_stages(request)
    unmet = {stage.name: stage.unmet(gpu) for stage in stages}
    ordered: list[tuple[int, int, CheckTask]] = []

    for sel in selections:
        op = sel.op
        t0 = time.perf_counter()
        calibrations: dict[str, Calibration] = {}
        errors: dict[str, str] = {}
        plans: dict[str, Path] = {}
        cases = _without_fatal_empty_cases(request.spec_file, op, plan_cases(op, budget_name, request.seed),
                                           sel.dtypes[0], info)
        info["case_counts"][op.name] = len(cases)
        for dtype in sel.dtypes:
            if status is not None:
                status(f"calibrating {op.name} in {dtype} ({len(cases)} cases)")
            refuse_oversized_cases(op, [token.case] if token else cases, dtype)
            try:
                with inputs_generated_once():  # truth, baseline, perturbation and bound read each case's once
                    truths, baselines, kept = [], [], []
                    for case in cases:
                        try:
                            t, b = truth_and_baseline(op, case, dtype)
                        except CalibrationError:
                            if _is_added_empty_case(case):
                                continue  # the reference refuses empty tensors: so may the implementations
                            raise
                        truths.append(t)
                        baselines.append(b)
                        kept.append(case)
                    if len(kept) < len(cases):
                        info.setdefault("dropped_empty_cases", {})[f"{op.name}.{dtype}"] = len(cases) - len(kept)
                    cal = calibrate(op, dtype, kept, truths, baselines)
                    if token:
                        plan = _replay_plan(op, dtype, request, cal, token.case, budget_name)
                    else:
                        plan = PlanFile(op.name, dtype, budget_name, request.seed, kept, truths, cal.budgets,
                                        cal.masks, cal.out_dtypes, cal.pooled_rmse, cal.pooled_quantile, cal.n_cases,
                                        cal.summary())
            except CalibrationError as exc:
                # The reference is the user's input: one line, exit 2 (never "a bug in opgate").
                raise InputError(f"spec file {request.spec_file}: {exc}; fix the reference (it defines the "
                                 "operator's meaning) or the dims/dtypes it is given") from None
            path = workdir / f"plan-{len(plans)}-{op.name}-{dtype}.pt".replace("/", "_")
            plan.save(path)
            plans[dtype] = path
            calibrations[dtype] = cal
        preset.append(_calibration_result(op, calibrations, errors, budget_name, request.seed,
                                          time.perf_counter() - t0))
        op_plan = _operator_plan(sel, request, budget_name, gpu, workdir, timeout, plans, token is not None)
        stage_items, stage_preset = stage_tasks(op_plan, stages, unmet)
        ordered += [(order, len(ordered) + k, task) for k, (order, task) in enumerate(stage_items)]
        preset += stage_preset
    tasks = [task for _, _, task in sorted(ordered, key=lambda entry: entry[:2])]
    if gpu and token is None:
        gpu_stage_names = {s.name for s in stages if s.needs.gpu}
        tasks = fan_out_gpu_stages(tasks, gpu_stage_names, *_visible_gpus())
    info["engine"] = {"jobs": request.jobs, "warm_workers": True, "stages": [s.name for s in stages],
                      "prepare_s": round(time.perf_counter() - started, 2)}
    return tasks, preset, info


def _prestart_workers(pool: WarmPool, selections: Sequence[Selection], request: VerifyRequest, gpu: bool) -> None:
    """Start up to --jobs warm workers now, one per implementation first (the GPU stages' implementations
    before the others), so their imports and the spec load overlap the calibration instead of following it."""
    from opgate.verify.backends import backend

    keyed: list[tuple[str, dict[str, str]]] = []
    for sel in selections:
        usable = [c for c in sel.choices if not backend(c.backend).unavailable_reason()]  # TVM absent: no worker
        ranked = sorted(usable, key=lambda c: not (c.origin == "user" and backend(c.backend).gpu_stages))
        for choice in ranked:
            env = child_env(backend(choice.backend).child_env(gpu), request.jobs)
            keyed.append((OperatorPlan.worker_key_for(request.spec_file.resolve(), sel.op.name, choice.name, env),
                          env))
    for index in range(min(request.jobs, 2 * len(keyed)) if keyed else 0):
        key, env = keyed[index % len(keyed)]
        pool.prestart(CheckTask("verify.warm_up", "warm-up", "opgate.verify.loaded_specs:WarmUpCheck", 600.0,
                                CheckContext(verb="verify", options={"spec_file": str(request.spec_file.resolve())}),
                                env=env, worker=key))


def stage_tasks(plan: OperatorPlan, stages: Sequence[Stage], unmet: dict[str, str | None],
                ) -> tuple[list[tuple[int, CheckTask]], list[CheckResult]]:
    """Each stage's tasks for one operator, with its scheduling order; a stage whose needs are unmet is one
    `skipped` result (when it would have checked anything), and a stage's up-front verdicts are results."""
    items: list[tuple[int, CheckTask]] = []
    preset: list[CheckResult] = []
    for stage in stages:
        if stage.whole_run_group:
            continue
        reason = unmet.get(stage.name)
        if reason is not None:
            if stage.applies_to(plan) and not plan.replaying:
                preset.append(CheckResult(f"verify.{plan.op.name}.{stage.name}", f"{plan.op.name}: {stage.name}",
                                          Outcome.SKIPPED, reason))
            continue
        for item in stage.tasks(plan):
            if isinstance(item, CheckResult):
                preset.append(item)
            else:
                items.append((stage.order, item))
    return items, preset


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
    from opgate.stage_api import discover_stages

    registry = discover_stages()
    names = ["numerics", *[n for n in request.stages if n != "numerics"]]
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise InputError(f"--stages {unknown[0]!r} is not a stage; choose from {', '.join(registry)}")
    return [registry[n] for n in names]


def child_env(backend_env: dict[str, str], jobs: int) -> dict[str, str]:
    """The environment every verify child of one implementation starts with."""
    return {
        # Children share the cores: one intra-op thread pool per child, sized to its share.
        "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // max(1, jobs))),
        # Inductor's parallel compile pool costs seconds to start and competes with sibling children.
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
        "TRITON_DEFAULT_FP_FUSION": os.environ.get("TRITON_DEFAULT_FP_FUSION", "1"),
        # The numerics check turns on torch's deterministic mode (so torch.empty() is NaN-poisoned); cuBLAS
        # needs a fixed workspace for that (PyTorch's reproducibility notes), else every GEMM warns.
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ":4096:8"),
        **backend_env,  # e.g. TRITON_INTERPRET=1 for Triton without a GPU (read when triton is imported)
    }


def _operator_plan(sel: Selection, request: VerifyRequest, budget_name: str, gpu: bool, workdir: Path,
                   timeout: float, plans: dict[str, Path], replaying: bool) -> OperatorPlan:
    from opgate.verify.backends import backend

    envs = {c.name: child_env(backend(c.backend).child_env(gpu), request.jobs) for c in sel.choices}
    gpu_choices = [c for c in sel.choices if c.origin == "user" and backend(c.backend).gpu_stages]
    return OperatorPlan(
        op=sel.op, choices=list(sel.choices), dtypes=list(sel.dtypes), spec_file=request.spec_file.resolve(),
        budget=budget_name, seed=request.seed, gpu=gpu, jobs=request.jobs, workdir=workdir, out_dir=request.out_dir,
        timeout_s=timeout, replaying=replaying, plans=plans, child_envs=envs, gpu_choices=gpu_choices,
        options={"extras": request.extras or replaying, "shrink": request.shrink,
                 "case_timeout_s": request.case_timeout_s, "sanitizer_tools": list(request.sanitizer_tools)})


def run_verify(request: VerifyRequest, console: Any) -> RunReport:
    """Plan and calibrate here, then run every check in warm workers with a progress bar; whole-spec stages
    (opgate analyze's) after."""
    from opgate.session import run_session

    with tempfile.TemporaryDirectory(prefix="opgate-verify-") as tmp:
        workdir = Path(tmp)
        (workdir / "workers").mkdir()
        pool = WarmPool(workdir / "workers", warm_worker_limit(request.jobs))
        try:
            if console.is_terminal:
                with console.status("calibrating") as spinner:
                    tasks, preset, info = prepare_tasks(request, workdir, lambda text: spinner.update(text), pool)
            else:
                tasks, preset, info = prepare_tasks(request, workdir, pool=pool)
            report = run_session("verify", tasks, console, jobs=request.jobs, preset=preset, extra=info,
                                 follow_up=resume_after_crash, pool=pool)
        finally:
            pool.close()
    if not request.replay:
        report = _with_whole_run_stages(report, request, console)
    return report


def _with_whole_run_stages(report: RunReport, request: VerifyRequest, console: Any) -> RunReport:
    """Stages that run once over the whole spec (e.g. `--stages portability,occupancy,roofline`, opgate
    analyze's through the plugin registry): each group once, its results joined into this report."""
    groups: dict[str, list[Stage]] = {}
    for stage in chosen_stages(request):
        if stage.whole_run_group:
            groups.setdefault(stage.whole_run_group, []).append(stage)
    for group, members in groups.items():
        whole = members[0].run_whole(request.spec_file.resolve(), [m.name for m in members], request, console)
        report = dataclasses.replace(report, results=report.results + whole.results,
                                     duration_s=report.duration_s + whole.duration_s,
                                     extra={**report.extra, group: whole.extra})
    return report
