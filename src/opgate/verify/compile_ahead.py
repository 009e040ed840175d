"""A GPU implementation's kernels compiled for its whole case plan before its calibration ends.

A library run's numerics checks are compile-bound, and each waits for its plan's calibration. The plans calibrated
last carry their compiles into the run's tail. On the H200 (thirty-eighth session, docs/benchmarks.md, the library
corpus) 2,111 of the checks' 3,484 s went to 5,072 Triton compiles. FlagGems' norms calibrated last (340-386 s);
their checks then compiled one kernel for 60-104 s each at N = 65537, and the numerics ended at 510 s.

A compile-ahead task starts with the run. It calls the implementation once per distinct shape and layout of the
plan's cases, largest first: a compile depends on shapes, strides and dtypes, not on values. It runs in the warm
worker key its numerics check will use, under the check's one-config-per-key autotuning
(verify/backends/autotune_choice.py). The check then finds its kernels in that worker's memory or in Triton's disk
cache. The task stops once its plan is written, at its next shape: the check is about to start, and compiling
beside it would compile twice. The check waits for a task that still runs (CheckTask.after_running); it used not to,
and on the H100 (fortieth session) FlagGems' skip_layer_norm checks compiled the kernel their tasks were compiling,
85 s each, and ended the numerics at 402 s, 92 s after their tasks. Whatever goes wrong is the check's to meet and
report, so the task's result is internal (never reported), even when its process dies (resume.follow_up).

On the H100 host, one library run of fla's and FlagGems' eight spec files after another on the same machine, each
from empty caches (thirty-ninth session, docs/benchmarks.md): with the tasks the numerics checks ended at 276 s and
spent 324 of their 1,137 s in Triton compiles; without, they ended at 334 s and spent 1,021 of 2,053 s compiling.
So a GPU run of a library makes them (OPGATE_COMPILE_AHEAD=0 turns them off); a run of one spec file, not measured,
makes them where OPGATE_COMPILE_AHEAD=1 asks. They add GPU memory beside the checks: a run's idle workers that hold
it end first (engine/gpu_memory.py).

A task helps only until its plan is written, so the tasks of the plans written last go first. They were queued in
file order with the run; in a library run on the H100 (forty-fifth session, docs/benchmarks.md) FlagGems' norms,
whose plans are written last, had their tasks 144th-159th of 174. Once the numerics filled the slots no task started,
and those tasks began at 313 s, after their plans: each check then compiled its kernel itself at N = 65537 (61-105 s)
and the numerics ended at 406 s. In the run where such a task happened to begin at 105 s its check took 11 s. Now the
calibrator feeds the tasks once it has ranked the plans, latest predicted plan first (plan_order.predicted_ends, each
side of the pool with its processes). OPGATE_COMPILE_AHEAD_ORDER=file queues them with the run in file order, as
before, for the A/B.

That queue order did not hold either. The runner takes, among ready tasks of one order, a later one whose warm-worker
key has an idle worker before a head whose key has none (runner._with_idle_worker). FlagGems' norms, first in the
queue, had no idle worker of their spec file's key, so in the H100 library runs of the forty-seventh and forty-eighth
sessions every free slot went to later tasks from 19 s on, and the norms' tasks began at 305-365 s, after their plans.
The tasks are now `ranked` (CheckTask.ranked): the head keeps its place and starts a worker of its key.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Sequence

from opgate.checks.base import Check, CheckContext
from opgate.model.results import CheckResult
from opgate.verify.resume import COMPILE_AHEAD_TARGET as TARGET

ENV = "OPGATE_COMPILE_AHEAD"
SUFFIX = ".compile_ahead"  # a task's check id: verify.<op>.<impl>.<dtype>.compile_ahead
ORDER = 41  # after a ready numerics check (40), before the runtime warm-ups (42)
# Queued before a ready numerics check instead (OPGATE_COMPILE_AHEAD=first, forty-second session), on one H100 in one
# A/B from empty caches each (forty-third session): the tasks held the slots from the start, the numerics began at
# 185 s (19 s) and ended at 350 s (343 s), and the runtime checks began at 407 s (367 s). Removed.
SLOT_SHARE = 0.5  # at most half the slots, as the runtime warm-ups
# Slots the tasks may take ahead of the numerics while they wait (CheckTask.slot_floor), as a fraction of the run's.
# None by default. In the forty-sixth session's library run on an H100 the tasks were fed at 21 s, found the slots held
# by the runtime warm-ups, and then lost every slot that freed to a numerics check (order 40 before their 41): 0.4
# processes on average ran them in the first 100 s, and FlagGems' rms_norm.grad tasks started at 419 s, after their
# plans, so its checks compiled their N = 65537 kernel themselves (83-84 s each) and ended the numerics at 504 s.
# OPGATE_COMPILE_AHEAD_SLOT_FLOOR sets it for that A/B. At 0.125 (2 of 16 slots; forty-seventh session, one H100,
# this arm first) more tasks ended before their plans (19 of the 30 plans written last, against 9) and skip_layer_norm's
# checks compiled 19 s at most (97 s), but its three tasks took 126-201 s each and held both floor slots for 140 s, so
# rms_norm.grad's tasks (28th-30th in the queue) began after their plans in both arms; the numerics ended at 465 s
# (414 s without, whose calibration ended 30 s sooner). At 0.25 (4 of 16; forty-eighth session, one H100, this arm
# second) 26 of the last 30 plans had their tasks end first, but the numerics kept 4 processes from 50 s to 300 s
# (6.3 on average without), the last plan came at 342 s (309 s) and 5 numerics checks still ran at 504 s (all had
# ended at 486 s without). Off: the tasks cost the side-by-side work more than the in-check compiles they save.
SLOT_FLOOR_ENV = "OPGATE_COMPILE_AHEAD_SLOT_FLOOR"
ORDER_ENV = "OPGATE_COMPILE_AHEAD_ORDER"
TIMEOUT_S = 600.0


def wanted(gpu: bool, library: bool = False) -> bool:
    """Whether a run makes compile-ahead tasks: on a GPU, for a `library` (several spec files or a folder), where
    they were measured, unless OPGATE_COMPILE_AHEAD=0; for one spec file where OPGATE_COMPILE_AHEAD=1 asks."""
    asked = os.environ.get(ENV, "").strip()
    return gpu and (asked == "1" or (library and asked != "0"))


def slot_floor() -> float:
    """The tasks' floor of slots (SLOT_FLOOR_ENV; 0 unless set); InputError for a bad value (the engine asks once
    before any work)."""
    from opgate.engine.settings import slot_fraction

    return slot_fraction(SLOT_FLOOR_ENV, 0.0, SLOT_SHARE)


# Fed when each plan's calibration starts instead (OPGATE_COMPILE_AHEAD_ORDER=calibration, fifty-fourth session),
# queued before the ready numerics checks in at most a quarter of the slots, on one H100 after the default arm on the
# same machine (fifty-fifth session, each arm from empty caches): rms_norm.grad's tasks ran 232-325 s and its checks
# compiled 56 s in all (234 s in the default arm), but the tasks, fed while their plans were still being calibrated,
# compiled the uncalibrated plans' shapes: 2,427 compiles in 1,215 s against 537 in 720 s, and the checks' own
# compiles fell only from 5,059 to 4,542. skip_layer_norm's tasks waited for a share slot (269-340 s), its checks
# compiled skip_layer_norm_kernel at N = 65537 for 98-100 s, and the numerics ended at 455 s (426 s in the default
# arm). Removed.
ORDERS = ("", "file")


def queue_order() -> str:
    """OPGATE_COMPILE_AHEAD_ORDER: '' (the calibrator feeds the tasks once it has ranked the plans, those written
    last first) or 'file' (queued with the run in file order); InputError for another value (the engine asks once
    before any work)."""
    from opgate.model.errors import InputError

    value = os.environ.get(ORDER_ENV, "").strip().lower()
    if value not in ORDERS:
        raise InputError(f"{ORDER_ENV}={value!r}: not a compile-ahead order; use file, or unset it")
    return value


def in_file_order() -> bool:
    """Whether OPGATE_COMPILE_AHEAD_ORDER=file asks for the tasks queued with the run in file order."""
    return queue_order() == "file"


def distinct_shapes(cases: Sequence[Any], elements: Any) -> list[Any]:
    """One case per distinct (dims, layout), the most elements first (`elements(case)`): a long compile (a whole
    row in one block) starts first. Empty cases are left out: they launch nothing to compile."""
    seen: dict[tuple[Any, str], Any] = {}
    for case in cases:
        if not case.is_empty:
            seen.setdefault((case.dims, case.layout), case)
    return sorted(seen.values(), key=lambda case: -elements(case))


class CompileAheadCheck(Check):
    """Call one implementation in one dtype at every distinct shape of its case plan, outputs discarded."""

    verbs = ("verify",)
    levels = ("quick", "standard", "thorough")

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.engine import gpu_pause
        from opgate.verify.backends import prepare
        from opgate.verify.backends.base import find_choice
        from opgate.verify.inputs import case_input_elements, make_inputs, plan_cases
        from opgate.verify.loaded_specs import loaded_operator
        from opgate.verify.tasks import CompileAheadPayload

        started = time.perf_counter()
        task = CompileAheadPayload.from_dict(ctx.options)
        op = loaded_operator(task.spec_file, task.op)
        prepared = prepare(find_choice(op, task.impl), op, task.dtype, Path(task.workdir))
        plan = Path(task.plan_path)
        calls, failures, stopped = 0, 0, ""
        try:
            if prepared.poisoned_out:  # it writes into buffers shaped like the truth, which only the plan holds
                stopped = "the implementation takes out= buffers"
            shapes = [] if stopped else distinct_shapes(plan_cases(op, task.budget, task.seed),
                                                        lambda case: case_input_elements(op, case))
            for case in shapes:
                if plan.exists():
                    stopped = "its plan was written"
                    break
                gpu_pause.pause_point()  # a measurement window holds the GPU: wait, as the numerics do
                generated = make_inputs(op, case, task.dtype)
                try:
                    prepared.run(generated.values, generated.layout_applied, [])
                    calls += 1
                except Exception as exc:  # the numerics check meets it again and reports it
                    failures += 1
                    if "CUDA" in str(exc) and not _cuda_usable():
                        stopped = "the GPU context broke"
                        break
        finally:
            if prepared.release is not None:
                prepared.release()
        compiles = prepared.facts.get("triton_jit") or {}
        return self.passed(
            f"{calls} call(s) ahead of the calibration, {failures} raised" + (f"; stopped: {stopped}" if stopped
                                                                              else ""),
            extra={"internal": True, "calls": calls, "raised": failures, "stopped": stopped,
                   "compiles": compiles.get("compiles", 0) if isinstance(compiles, dict) else 0,
                   "seconds": round(time.perf_counter() - started, 3)})


def summary(results: Sequence[CheckResult]) -> dict[str, Any]:
    """What the run's compile-ahead tasks did, for the report (extra.engine.compile_ahead; their own results are
    internal): how many ran, called, compiled and in what time, how many stopped at their plan, and those that ended
    otherwise (an error, a death), by id with their reason."""
    ahead = [r for r in results if r.check_id.endswith(SUFFIX)]
    extras = [r.extra or {} for r in ahead]
    return {"tasks": len(ahead), "calls": sum(int(e.get("calls", 0)) for e in extras),
            "compiles": sum(int(e.get("compiles", 0)) for e in extras),
            "seconds": round(sum(float(e.get("seconds", 0.0)) for e in extras), 1),
            "stopped_at_their_plan": sum(e.get("stopped") == "its plan was written" for e in extras),
            "not_passed": {r.check_id: r.reason[:200] for r in ahead if r.outcome.value != "passed"}}


def _cuda_usable() -> bool:
    """Whether this process's CUDA context still runs work (an illegal address breaks it for good)."""
    import torch

    try:
        torch.cuda.synchronize()
        return True
    except Exception:
        return False


def ahead_tasks(plan: Any, job_index: int, dtypes: Sequence[str], budget: str, seed: int, workdir: Path) -> list[Any]:
    """One task per GPU implementation of the user's (`plan.gpu_choices`) x dtype of `plan` (the engine's
    OperatorPlan of calibration job `job_index`), in the warm worker key of its numerics check."""
    import dataclasses

    from opgate.engine.stages import Stage
    from opgate.verify.calibrator import plan_file_path
    from opgate.verify.tasks import CompileAheadPayload

    class _Ahead(Stage):
        name = "compile_ahead"
        order = ORDER
        timeout_s = TIMEOUT_S

    out = []
    floor = slot_floor()
    for choice in plan.gpu_choices:
        for k, dtype in enumerate(dtypes):
            payload = CompileAheadPayload(
                spec_file=str(plan.spec_file), op=plan.op.name, impl=choice.name, dtype=dtype, budget=budget,
                seed=seed, plan_path=str(plan_file_path(workdir, job_index, k, plan.op.name, dtype)),
                workdir=str(plan.scratch_dir("work")))
            task = plan.task(_Ahead(), f"verify.{plan.op.name}.{choice.name}.{dtype}{SUFFIX}",
                             f"{plan.op.name}: {choice.describe()} in {dtype} (compile ahead)", TARGET, TIMEOUT_S,
                             payload, choice, labels={"dtype": dtype})
            out.append(dataclasses.replace(task, slot_share=SLOT_SHARE, slot_floor=floor,
                                           pausable=bool(task.worker), ranked=True))
    return out
