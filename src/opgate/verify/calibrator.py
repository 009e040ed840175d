"""Calibration beside the checks: the parent's float64 truths and budgets, computed in a thread while the stages
that need no plan (runtime, sanitizer, recovery: they draw their own inputs) already run.

Each operator x dtype's plan file is handed to the runner (a TaskFeed) the moment it is written, so that dtype's
numerics checks start while the next dtype calibrates. The size-0 cases opgate adds are tried first in a child
(verify/empty_probe.py: a reference may kill the process on them), started at once and waited for only when the
calibration reaches them, after the operator's other cases.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from opgate.errors import InputError
from opgate.results import CheckResult, Figure, Outcome, Threshold
from opgate.runner import TaskFeed
from opgate.stage_api import OperatorPlan, Stage, stage_tasks
from opgate.verify.calibrate import (
    FLOOR_EPS, K_RMSE, Calibration, CalibrationError, budgets_for_case, calibrate, truth_and_baseline,
)
from opgate.verify.inputs import Case, inputs_generated_once, plan_cases
from opgate.verify.planfile import PlanFile
from opgate.verify.replay import ReplayToken


def calibration_threads() -> int:
    """torch's intra-op threads for the calibration: a quarter of the CPUs (at least 2). The checks run beside it,
    one thread each; an OpenMP team as wide as the machine then waits at every barrier for a preempted member
    (softmax's float32 calibration took 32.6 s with 16 threads, 9.3 s with 2, on the H200 host beside the checks;
    docs/benchmarks.md).
    OPGATE_CALIBRATION_THREADS overrides it."""
    import os

    override = os.environ.get("OPGATE_CALIBRATION_THREADS", "").strip()
    if override.isdigit() and int(override) > 0:
        return int(override)
    return max(2, (os.cpu_count() or 2) // 4)


def is_added_empty_case(case: Case) -> bool:
    """A size-0 case opgate added (not one the spec declared)."""
    return case.origin != "declared" and any(size == 0 for _, size in case.dims)


def _fatal_empty_cases(spec_file: Path, op_name: str, dtype: str, cases: Sequence[Case]) -> list[Case]:
    """The opgate-added empty cases whose reference kills a process (tried in a child: empty_probe.py)."""
    from opgate.verify.empty_probe import surviving_cases

    empty = [c for c in cases if is_added_empty_case(c)]
    if not empty:
        return []
    survived = surviving_cases(spec_file.resolve(), op_name, dtype, empty)
    return [c for i, c in enumerate(empty) if i not in survived]


def calibration_result(op: Any, calibrations: dict[str, Calibration], budget: str, seed: int,
                       duration: float) -> CheckResult:
    """The `verify.<op>.calibration` result: the pooled eager-vs-float64 errors each dtype's budgets come from."""
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
    extra = {"budget": budget, "seed": seed, "calibrations": {d: c.summary() for d, c in calibrations.items()}}
    n = next(iter(calibrations.values())).n_cases if calibrations else 0
    reason = (f"budgets calibrated from PyTorch eager vs float64 over {n} cases for "
              f"{', '.join(calibrations)} ({budget} budget, seed {seed})")
    return CheckResult(f"verify.{op.name}.calibration", f"{op.name}: calibrated error budgets", Outcome.PASSED,
                       reason, tuple(figures), "", duration, extra)


@dataclass
class CalibrationJob:
    """One operator's share of the calibration: what the thread needs and what it hands back."""

    op: Any  # opgate.core.spec.Operator
    dtypes: list[str]
    make_plan: Callable[[dict[str, Path]], OperatorPlan]  # the engine's OperatorPlan for these plan files
    cases: list[Case] = field(default_factory=list)


class Calibrator(threading.Thread):
    """Calibrates every job in turn; puts the tasks of the stages that need plans into `feed` and closes it (with
    the error, when the reference cannot be evaluated: an InputError, exit 2, as before any check ran).
    `results` gets each operator's calibration result and the stages' up-front verdicts."""

    def __init__(self, jobs: Sequence[CalibrationJob], stages: Sequence[Stage], unmet: dict[str, str | None],
                 feed: TaskFeed, spec_file: Path, budget: str, seed: int, workdir: Path, token: ReplayToken | None,
                 info: dict[str, Any]) -> None:
        super().__init__(name="opgate-calibration", daemon=True)
        self.jobs, self.stages, self.unmet, self.feed = list(jobs), list(stages), unmet, feed
        self.spec_file, self.budget, self.seed, self.workdir, self.token = spec_file, budget, seed, workdir, token
        self.info = info
        self.results: list[CheckResult] = []
        self.task_keys: dict[str, tuple[int, int, int]] = {}  # check id -> (stage order, operator, sequence)
        self.stopped = threading.Event()
        self.started_at = 0.0
        self.spans: dict[str, list[float]] = {}  # "op dtype" -> [start, end], seconds after the thread started

    def run(self) -> None:
        self.started_at = time.perf_counter()
        import torch

        torch.set_num_threads(calibration_threads())
        try:
            with ThreadPoolExecutor(max_workers=max(1, len(self.jobs)), thread_name_prefix="opgate-empty") as pool:
                probes = {}
                for job in self.jobs:
                    job.cases = plan_cases(job.op, self.budget, self.seed)
                    probes[job.op.name] = pool.submit(_fatal_empty_cases, self.spec_file, job.op.name,
                                                      job.dtypes[0], job.cases)
                for index, job in enumerate(self.jobs):
                    if self.stopped.is_set():
                        break
                    self._calibrate(index, job, probes[job.op.name])
        except BaseException as exc:  # noqa: BLE001 - handed to the runner, re-raised in the main thread
            self.feed.close(exc)
            return
        self.feed.close()

    def _calibrate(self, op_index: int, job: CalibrationJob, probe: "Future[list[Case]]") -> None:
        from opgate.verify.memory_guard import refuse_oversized_cases

        op, t0 = job.op, time.perf_counter()
        calibrations: dict[str, Calibration] = {}
        plans: dict[str, Path] = {}
        fatal: list[Case] | None = None
        per_dtype = [s for s in self.stages if s.needs.calibration and s.per_dtype_plans]
        per_operator = [s for s in self.stages if s.needs.calibration and not s.per_dtype_plans]
        for dtype in job.dtypes:
            if self.stopped.is_set():  # the run ended (Ctrl-C, an error): no more plans
                return
            begin = time.perf_counter() - self.started_at
            refuse_oversized_cases(op, [self.token.case] if self.token else job.cases, dtype)
            try:
                with inputs_generated_once():  # truth, baseline, perturbation and bound read each case's once
                    computed: dict[int, tuple[Any, Any]] = {}
                    order = sorted(range(len(job.cases)), key=lambda k: is_added_empty_case(job.cases[k]))
                    for k in order:
                        case = job.cases[k]
                        if is_added_empty_case(case):
                            if fatal is None:  # the child's verdict on the empty cases, needed only now
                                fatal = probe.result()
                                if fatal:
                                    self.info.setdefault("fatal_empty_cases", {})[op.name] = [
                                        c.label() for c in fatal]
                            if case in fatal:
                                continue
                        try:
                            computed[k] = truth_and_baseline(op, case, dtype)
                        except CalibrationError:
                            if is_added_empty_case(case):
                                continue  # the reference refuses empty tensors: so may the implementations
                            raise
                    kept = [job.cases[k] for k in sorted(computed)]
                    truths = [computed[k][0] for k in sorted(computed)]
                    baselines = [computed[k][1] for k in sorted(computed)]
                    offered = len(job.cases) - len(fatal or [])
                    self.info["case_counts"][op.name] = offered
                    if len(kept) < offered:
                        self.info.setdefault("dropped_empty_cases", {})[f"{op.name}.{dtype}"] = offered - len(kept)
                    cal = calibrate(op, dtype, kept, truths, baselines)
                    plan = (self._replay_plan(op, dtype, cal) if self.token else
                            PlanFile(op.name, dtype, self.budget, self.seed, kept, truths, cal.budgets, cal.masks,
                                     cal.out_dtypes, cal.pooled_rmse, cal.pooled_quantile, cal.n_cases,
                                     cal.summary()))
            except CalibrationError as exc:
                # The reference is the user's input: one line, exit 2 (never "a bug in opgate").
                raise InputError(f"spec file {self.spec_file}: {exc}; fix the reference (it defines the "
                                 "operator's meaning) or the dims/dtypes it is given") from None
            path = self.workdir / f"plan-{op_index}-{len(plans)}-{op.name}-{dtype}.pt".replace("/", "_")
            plan.save(path)
            plans[dtype] = path
            calibrations[dtype] = cal
            self.spans[f"{op.name} {dtype}"] = [round(begin, 2), round(time.perf_counter() - self.started_at, 2)]
            self._hand_over(op_index, job.make_plan({dtype: path}), per_dtype)
        self.results.append(calibration_result(op, calibrations, self.budget, self.seed, time.perf_counter() - t0))
        self._hand_over(op_index, job.make_plan(plans), per_operator)

    def _hand_over(self, op_index: int, plan: OperatorPlan, stages: Sequence[Stage]) -> None:
        if not stages:
            return
        items, preset = stage_tasks(plan, stages, self.unmet)
        self.results += preset
        for order, task in items:
            self.task_keys[task.check_id] = (order, op_index, len(self.task_keys))
        self.feed.put([task for _, task in sorted(items, key=lambda item: item[0])])

    def _replay_plan(self, op: Any, dtype: str, cal: Calibration) -> PlanFile:
        """A plan of one case (from a replay token) judged with the full plan's pooled calibration."""
        assert self.token is not None
        case = self.token.case
        truth, baseline = truth_and_baseline(op, case, dtype)
        budgets, masks, out_dtypes = budgets_for_case(op, dtype, case, truth, baseline, cal.pooled_rmse,
                                                      cal.pooled_quantile, cal.n_cases)
        return PlanFile(op.name, dtype, self.budget, self.seed, [case], [truth], [budgets], [masks], out_dtypes,
                        cal.pooled_rmse, cal.pooled_quantile, cal.n_cases, cal.summary())
