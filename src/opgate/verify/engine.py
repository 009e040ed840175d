"""`opgate verify` in the parent process: select, plan, calibrate, fan out, collect.

1. Load the spec file and pick the operators, implementations and dtypes asked for.
2. Per op x dtype: plan the cases, compute the float64 truth and the eager baseline once (here, on the
   CPU), calibrate the budget, and write it all to a plan file.
3. One CheckTask per implementation x dtype, each in its own child process (opgate.runner): a crash or
   hang is an `error` for that implementation only. Triton children get TRITON_INTERPRET=1 when there
   is no GPU.
4. Return a RunReport: one calibration result per op, one result per implementation x dtype.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from opgate.checks.base import CheckContext
from opgate.errors import InputError
from opgate.results import CheckResult, Figure, Outcome, RunReport, Threshold
from opgate.runner import CheckTask
from opgate.verify.backends.base import ImplementationChoice, implementation_choices
from opgate.verify.calibrate import (
    FLOOR_EPS, K_RMSE, Calibration, CalibrationError, budgets_for_case, calibrate, truth_and_baseline,
)
from opgate.verify.gradients import with_gradient_operators
from opgate.verify.inputs import Case, budget_plan, plan_cases
from opgate.verify.planfile import PlanFile
from opgate.verify.replay import ReplayToken
from opgate.verify.resume import CASE_TIMEOUT_S, CASE_TIMEOUT_SHARE
from opgate.verify.resume import follow_up as resume_after_crash
from opgate.core.spec import Operator

CHECK_TARGET = "opgate.verify.check:VerifyImplementationCheck"
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
    jobs: int = 2
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


VERIFY_STAGES = ("numerics", "runtime", "sanitizer", "ncu", "recovery", "portability", "occupancy", "roofline")


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
NCU_TARGET = "opgate.verify.runtime:VerifyNcuCheck"
RUNTIME_TARGET = "opgate.verify.runtime:VerifyRuntimeCheck"
SANITIZER_TARGET = "opgate.verify.runtime:VerifySanitizerCheck"
RECOVERY_TARGET = "opgate.verify.oom_recovery:VerifyOomRecoveryCheck"


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


def _child_env(choice: ImplementationChoice, gpu: bool, jobs: int) -> dict[str, str]:
    env = {
        # Children share the cores: one intra-op thread pool per child, sized to its share.
        "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // max(1, jobs))),
        # Inductor's parallel compile pool costs seconds to start and competes with sibling children.
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
        "TRITON_DEFAULT_FP_FUSION": os.environ.get("TRITON_DEFAULT_FP_FUSION", "1"),
        # The child turns on torch's deterministic mode (so torch.empty() is NaN-poisoned); cuBLAS needs
        # a fixed workspace for that (PyTorch's reproducibility notes), else every GEMM warns.
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ":4096:8"),
    }
    if choice.backend == "triton" and not gpu:
        env["TRITON_INTERPRET"] = "1"  # read when triton is imported: set for the child before it starts
    return env


def _gpu_present() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def prepare_tasks(request: VerifyRequest, workdir: Path,
                  status: Any = None) -> tuple[list[CheckTask], list[CheckResult], dict[str, Any]]:
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
    from opgate.verify.backends.tvm_backend import unavailable_reason as tvm_unavailable

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
                    plan = PlanFile(op.name, dtype, budget_name, request.seed, kept, truths, cal.budgets, cal.masks,
                                    cal.out_dtypes, cal.pooled_rmse, cal.pooled_quantile, cal.n_cases, cal.summary())
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
        for choice in sel.choices:
            for dtype in sel.dtypes:
                check_id = f"verify.{op.name}.{choice.name}.{dtype}"
                title = f"{op.name}: {choice.describe()} in {dtype}"
                if dtype not in plans:
                    continue
                if choice.backend == "tvm" and tvm_unavailable():
                    preset.append(CheckResult(check_id, title, Outcome.SKIPPED, tvm_unavailable() or "",
                                              extra={"op": op.name, "implementation": choice.name,
                                                     "backend": "tvm", "dtype": dtype}))
                    continue
                artefact_dir = request.out_dir / "verify" / op.name / choice.name / dtype
                options = {
                    "check_id": check_id, "title": title, "spec_file": str(request.spec_file.resolve()),
                    "op": op.name, "impl": choice.name, "extras": request.extras or bool(token),
                    "plan_path": str(plans[dtype]), "artefact_dir": str(artefact_dir.resolve()),
                    "workdir": str(workdir / f"work-{len(tasks)}"), "shrink": request.shrink,
                    "case_timeout_s": min(timeout * CASE_TIMEOUT_SHARE, request.case_timeout_s or CASE_TIMEOUT_S),
                }
                tasks.append(CheckTask(check_id, title, CHECK_TARGET, timeout,
                                       CheckContext(verb="verify", level=budget_name, options=options),
                                       env=_child_env(choice, gpu, request.jobs)))
        runtime_tasks, runtime_preset = _runtime_tasks(op, sel, request, budget_name, gpu, token is not None)
        tasks += runtime_tasks
        preset += runtime_preset
    return tasks, preset, info


def _runtime_tasks(op: Operator, sel: Selection, request: VerifyRequest, budget_name: str, gpu: bool,
                   replaying: bool) -> tuple[list[CheckTask], list[CheckResult]]:
    """GPU runtime checks for the user's torch/Triton implementations: timing + graphs per dtype (each alone
    on the GPU), one sanitizer run per implementation and tool. Without a GPU: one `skipped` result saying why."""
    from opgate.verify.runtime import RUNTIME_BACKENDS, SANITIZER_TIMEOUT_S, VerifyRuntimeCheck

    wanted = [stage for stage in ("runtime", "sanitizer", "ncu", "recovery") if stage in request.stages]
    choices = [c for c in sel.choices if c.origin == "user" and c.backend in RUNTIME_BACKENDS]
    if replaying or not wanted or not choices:
        return [], []
    if not gpu:
        reason = "needs a CUDA GPU (none visible to torch): timing, roofline fraction, CUDA graph capture, " \
                 "compute-sanitizer, Nsight Compute and out-of-memory recovery run on a GPU host"
        return [], [CheckResult(f"verify.{op.name}.{stage}", f"{op.name}: {stage}", Outcome.SKIPPED, reason)
                    for stage in wanted]
    tasks: list[CheckTask] = []
    for choice in choices:
        base = {"spec_file": str(request.spec_file.resolve()), "op": op.name, "impl": choice.name,
                "seed": request.seed}
        env = _child_env(choice, True, 1)

        def add(suffix: str, target: str, timeout_s: float, title: str, exclusive: bool, **extra: Any) -> None:
            check_id = f"verify.{op.name}.{choice.name}.{suffix}"
            options = {**base, "dtype": sel.dtypes[0], **extra, "check_id": check_id,
                       "title": f"{op.name}: {choice.describe()} {title}"}
            tasks.append(CheckTask(check_id, options["title"], target, timeout_s,
                                   CheckContext(verb="verify", level=budget_name, options=options), env=env,
                                   exclusive=exclusive))

        # Measuring checks, and the one that fills the GPU, run alone (exclusive); the sanitizer does not.
        for dtype in (sel.dtypes if "runtime" in wanted else ()):
            add(f"{dtype}.runtime", RUNTIME_TARGET, VerifyRuntimeCheck.timeout_s, f"in {dtype} on the GPU", True,
                dtype=dtype)
        for tool in (request.sanitizer_tools if "sanitizer" in wanted else ()):
            add("sanitizer" if tool == "memcheck" else tool, SANITIZER_TARGET, SANITIZER_TIMEOUT_S + 60,
                f"under compute-sanitizer {tool}", False, tool=tool)
        if "recovery" in wanted:
            add("recovery", RECOVERY_TARGET, 300.0, "recovers from out-of-memory", True)
        if "ncu" in wanted:
            add("ncu", NCU_TARGET, 360.0, "under Nsight Compute", True)
    return tasks, []


def run_verify(request: VerifyRequest, console: Any) -> RunReport:
    """Plan and calibrate here, then run every implementation x dtype in its own process with a progress bar."""
    from opgate.session import run_session

    with tempfile.TemporaryDirectory(prefix="opgate-verify-") as tmp:
        workdir = Path(tmp)
        if console.is_terminal:
            with console.status("calibrating") as spinner:
                tasks, preset, info = prepare_tasks(request, workdir, status=lambda text: spinner.update(text))
        else:
            tasks, preset, info = prepare_tasks(request, workdir)
        report = run_session("verify", tasks, console, jobs=request.jobs, preset=preset, extra=info,
                             follow_up=resume_after_crash)
    analyze_stages = [s for s in request.stages if s in ("portability", "occupancy", "roofline")]
    if analyze_stages and not request.replay:
        report = _with_analyze(report, request, analyze_stages, console)
    return report


def _with_analyze(report: RunReport, request: VerifyRequest, stages: list[str], console: Any) -> RunReport:
    """`--stages portability,occupancy,roofline`: opgate analyze's results joined into this report."""
    from opgate.analyze.portability import DEFAULT_TARGETS, parse_targets
    from opgate.analyze.run import AnalyzeOptions, run_analyze

    options = AnalyzeOptions(spec_file=request.spec_file.resolve(), targets=parse_targets(list(DEFAULT_TARGETS)),
                             out_dir=request.out_dir / "analyze", jobs=request.jobs, stages=stages,
                             dtypes=list(request.dtypes) or None)
    analyzed, _ = run_analyze(options, console)
    return dataclasses.replace(report, results=report.results + analyzed.results,
                               duration_s=report.duration_s + analyzed.duration_s,
                               extra={**report.extra, "analyze": analyzed.extra})
