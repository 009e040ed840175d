"""The stages opgate ships: numerics (always), and on a GPU runtime, sanitizer, recovery (default), ncu and qos
(on request). Each turns one operator's plan into tasks; the checks they name live in verify/check.py,
verify/runtime.py, verify/oom_recovery.py and verify/qos_stage.py."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from opgate.model.results import CheckResult, Outcome
from opgate.engine.runner import CheckTask
from opgate.engine.stages import OperatorPlan, Stage, StageNeeds
from opgate.verify.tasks import GpuStagePayload, NumericsPayload


class NumericsStage(Stage):
    name = "numerics"
    summary = "every implementation x dtype over the calibrated case plan (always runs)"
    default = True
    order = 40
    per_dtype_plans = True  # a dtype's checks start as soon as its plan is written
    timeout_s = None  # the run's --timeout (by budget level: verify/engine.py TIMEOUT_BY_BUDGET)
    exclusive = False  # side by side: it judges answers, not time

    def tasks(self, plan: OperatorPlan) -> list[CheckTask | CheckResult]:
        from opgate.verify.backends import backend
        from opgate.verify.compile_ahead import SUFFIX as COMPILE_AHEAD_SUFFIX
        from opgate.verify.resume import CASE_TIMEOUT_S, CASE_TIMEOUT_SHARE

        out: list[CheckTask | CheckResult] = []
        from opgate.verify.case_costs import case_costs_path
        from opgate.verify.time_budget import check_seconds, operator_seconds

        case_timeout = min(plan.timeout_s * CASE_TIMEOUT_SHARE, plan.options.case_timeout_s or CASE_TIMEOUT_S)
        checks = len(plan.choices) * len(plan.dtypes)
        weights = {c.name: backend(c.backend).case_cost_weight(plan.gpu) for c in plan.choices}
        total_weight = sum(weights.values()) * len(plan.dtypes)
        operator_budget = operator_seconds(plan.budget, plan.gpu, plan.options.time_budget_s)
        # the slowest-starting implementations first (torch.compile compiles for seconds): they set the wall time
        for choice in sorted(plan.choices, key=lambda c: -backend(c.backend).startup_s):
            unavailable = backend(choice.backend).unavailable_reason()
            for dtype in plan.dtypes:
                if dtype not in plan.plans:
                    continue
                check_id = f"verify.{plan.op.name}.{choice.name}.{dtype}"
                title = f"{plan.op.name}: {choice.describe()} in {dtype}"
                if unavailable:
                    out.append(CheckResult(check_id, title, Outcome.SKIPPED, unavailable,
                                           extra={"op": plan.op.name, "implementation": choice.name,
                                                  "backend": choice.backend, "dtype": dtype}))
                    continue
                share = check_seconds(operator_budget, checks, plan.jobs, weights[choice.name], total_weight)
                budget = 0.0 if plan.replaying else share  # a late check shortens it when it starts
                payload = NumericsPayload(
                    spec_file=str(plan.spec_file), op=plan.op.name, impl=choice.name,
                    plan_path=str(plan.plans[dtype]), artefact_dir=str(plan.artefact_dir(choice.name, dtype)),
                    workdir=str(plan.scratch_dir("work")),
                    extras=plan.options.extras, shrink=plan.options.shrink,
                    case_timeout_s=case_timeout,
                    time_budget_s=budget,
                    operator_began_at=0.0 if plan.replaying else plan.calibration_began_at,
                    share_s=share, operator_budget_s=operator_budget,
                    case_costs_path=str(case_costs_path(plan.workdir, plan.spec_file, plan.op.name, choice.name)))
                task = plan.task(self, check_id, title, "opgate.verify.check:VerifyImplementationCheck",
                                 self.timeout_s, payload, choice, labels={"dtype": dtype})
                # it waits at its pause points while a measurement runs beside it (engine/gpu_windows.py), and
                # for its compile-ahead task to end while that runs (verify/compile_ahead.py)
                out.append(dataclasses.replace(task, pausable=task.uses_gpu and bool(task.worker),
                                               after_running=(f"{check_id}{COMPILE_AHEAD_SUFFIX}",)
                                               if task.uses_gpu else ()))
        return out


class _GpuStage(Stage):
    """A stage of the user's GPU implementations: one task per implementation (x dtype where `per_dtype`)."""

    # Each check draws its own inputs on the GPU (no plan file): the tasks start while the parent calibrates.
    needs = StageNeeds(gpu=True, gpu_implementations=True, calibration=False)
    target: ClassVar[str] = ""
    per_dtype: ClassVar[bool] = False
    retire: ClassVar[bool] = False
    retire_unless_passed: ClassVar[bool] = False  # CheckTask.retire_unless_passed
    warm: ClassVar[bool] = True  # in the implementation's warm workers (False: a fresh process per task)
    title_text: ClassVar[str] = ""

    def suffixes(self, plan: OperatorPlan) -> list[tuple[str, dict[str, object]]]:
        """(check-id suffix, payload fields) per task of one implementation."""
        if self.per_dtype:
            return [(f"{dtype}.{self.name}", {"dtype": dtype}) for dtype in plan.dtypes]
        return [(self.name, {})]

    def tasks(self, plan: OperatorPlan) -> list[CheckTask | CheckResult]:
        if plan.replaying:
            return []
        out: list[CheckTask | CheckResult] = []
        for choice in self.applies_to(plan):
            for suffix, fields in self.suffixes(plan):
                dtype = str(fields.get("dtype", plan.dtypes[0]))
                more = {**fields, **self.payload_fields(plan, dtype), "dtype": dtype}
                payload = GpuStagePayload(spec_file=str(plan.spec_file), op=plan.op.name, impl=choice.name,
                                          seed=plan.seed, artefact_dir=str(plan.artefact_dir(choice.name, dtype)),
                                          **more)  # type: ignore[arg-type]
                title = f"{plan.op.name}: {choice.describe()} {self.describe(fields, dtype)}"
                out.append(plan.task(self, f"verify.{plan.op.name}.{choice.name}.{suffix}", title, self.target,
                                     self.timeout_s, payload, choice, retire=self.retire, warm=self.warm,
                                     labels={k: str(v) for k, v in fields.items() if k in ("dtype", "tool")},
                                     retire_unless_passed=self.retire_unless_passed))
        return out

    def describe(self, fields: dict[str, object], dtype: str) -> str:
        return self.title_text.format(**{"dtype": dtype, **fields})

    def payload_fields(self, plan: OperatorPlan, dtype: str) -> dict[str, object]:
        """More GpuStagePayload fields of this stage's tasks of `plan` in `dtype`."""
        return {}


WARM_UP_SLOT_FLOOR_ENV = "OPGATE_WARM_UP_SLOT_FLOOR"


class RuntimeStage(_GpuStage):
    name = "runtime"
    summary = "GPU timing at perf_dims, roofline fraction, CUDA graph capture (GPU)"
    default = True
    # Exclusive: measured while nothing else runs on the GPU. The runner starts it once no side-by-side task of its
    # GPU waits (opgate.engine.runner), so a library's numerics are not queued behind every operator's timing.
    order = 10
    target = "opgate.verify.runtime:VerifyRuntimeCheck"
    timeout_s = 300.0  # its warm-up too (the same task, not exclusive)
    exclusive = True
    per_dtype = True
    title_text = "in {dtype} on the GPU"
    # Before each exclusive timing check, a warm-up call at the timing size in the same warm worker key, side by
    # side with the others (compiles and autotuning at that size: 15-90 s per fla kernel family on a cold H200,
    # which held the GPU alone and serialised a library's runtime checks); its result is not reported. It queues
    # after the numerics (order 40), which it must not delay: on a library the warm-ups filled the first minutes.
    warm_up_order = 42
    # At most half the slots: before the first plan is written only warm-ups can run, and on the H200 host 16 of
    # them (30-107 s each, compiling and autotuning fla's kernels) held every slot when the numerics arrived.
    warm_up_slot_share = 0.5
    # ... and at least 2 of 16 while they wait (CheckTask.slot_floor): queued after the numerics, which arrive until
    # the end of a library's calibration, none but the first nine warm-ups had started at 515 s, so no file could
    # reach its exclusive runtime and recovery checks (twenty-fourth H200 session; this floor not yet measured).
    # OPGATE_WARM_UP_SLOT_FLOOR (a fraction of the slots, up to the share) sets it, for the A/B of the floor.
    default_warm_up_slot_floor = 0.125

    @property
    def warm_up_slot_floor(self) -> float:
        from opgate.engine.settings import slot_fraction

        return slot_fraction(WARM_UP_SLOT_FLOOR_ENV, self.default_warm_up_slot_floor, self.warm_up_slot_share)

    def check_settings(self) -> None:
        from opgate.verify.backends.autotune_choice import within_limit_wanted

        self.warm_up_slot_floor  # noqa: B018 - raises InputError for a bad OPGATE_WARM_UP_SLOT_FLOOR
        within_limit_wanted()  # ... and for a bad OPGATE_RUNTIME_AUTOTUNE

    def payload_fields(self, plan: OperatorPlan, dtype: str) -> dict[str, object]:
        # one count per operator x dtype, shared by its implementations: the warm-ups count, the measurements read
        name = plan.op.name.replace("/", "_")
        return {"work_count_path": str(plan.workdir / "work_counts" / f"{name}.{dtype}.json")}

    def tasks(self, plan: OperatorPlan) -> list[CheckTask | CheckResult]:
        import dataclasses

        from opgate.verify.gradients import GRAD_SUFFIX
        from opgate.verify.resume import WARM_UP_TARGET

        # the timing runs in a measurement window if one opens (engine/gpu_windows.py): seconds long, and it takes
        # little memory beside the paused tasks'
        measured = [dataclasses.replace(item, measures_in_windows=True) if isinstance(item, CheckTask) else item
                    for item in super().tasks(plan)]
        warm_ups: list[CheckTask | CheckResult] = []
        forward = plan.op.name[:-len(GRAD_SUFFIX)] if plan.op.name.endswith(GRAD_SUFFIX) else ""
        for item in measured:
            if isinstance(item, CheckTask):
                # a gradient twin's call runs its operator's forward kernels at the same sizes: warmed up after the
                # operator's own warm-up, its forward's autotuning comes from Triton's disk cache
                # (TRITON_CACHE_AUTOTUNING) instead of being benchmarked a second time side by side
                own = f"verify.{plan.op.name}."
                after = (f"verify.{forward}.{item.check_id.removeprefix(own)}_warm_up",) if forward else ()
                warm_ups.append(dataclasses.replace(
                    item, check_id=f"{item.check_id}_warm_up", title=f"{item.title} (warm-up)",
                    target=WARM_UP_TARGET, exclusive=False, measures_in_windows=False,
                    order=self.warm_up_order, slot_share=self.warm_up_slot_share,
                    slot_floor=self.warm_up_slot_floor, after=after, pausable=bool(item.worker)))
        return warm_ups + measured


SANITIZER_NICE = 10
# Slots a library's sanitizer runs may take ahead of the numerics while they wait (CheckTask.slot_floor): 6 of the
# H200 host's 16. With none, the numerics took every slot from the first minute and 24 of a library's 32 sanitizer
# runs never started in 560 s (twenty-fourth H200 session); the 32 take ~2,500 slot-seconds, ~420 s on 6 slots.
SANITIZER_SLOT_FLOOR = 0.375


class SanitizerStage(_GpuStage):
    name = "sanitizer"
    summary = "compute-sanitizer memcheck, racecheck, initcheck, synccheck: one run per spec file and tool (GPU)"
    default = True
    order = 45  # after the numerics tasks start: compile-heavy numerics are the longest tasks
    # Each run is a compute-sanitizer process of its own; the check that starts it needs no warm state, and in a
    # warm worker it would hold one the numerics checks of the same implementation are waiting for.
    warm = False
    needs = StageNeeds(gpu=True, tools=("compute-sanitizer",), gpu_implementations=True, calibration=False)
    target = "opgate.verify.runtime:VerifySanitizerCheck"
    exclusive = False
    title_text = "under compute-sanitizer {tool}"

    @property
    def timeout_s(self) -> float:  # type: ignore[override]
        from opgate.verify.runtime import SANITIZER_TIMEOUT_S

        return SANITIZER_TIMEOUT_S + 60

    def find_tool(self, tool: str) -> str | None:
        from opgate.gpu.probes.sanitizer import SanitizerNotFound, find_compute_sanitizer

        try:
            return find_compute_sanitizer()
        except SanitizerNotFound:
            return None

    def suffixes(self, plan: OperatorPlan) -> list[tuple[str, dict[str, object]]]:
        return [("sanitizer" if tool == "memcheck" else tool, {"tool": tool}) for tool in plan.options.sanitizer_tools]

    def tasks(self, plan: OperatorPlan) -> list[CheckTask | CheckResult]:
        import dataclasses

        from opgate.engine.worker import NICE_ENV

        # a compute-sanitizer run is seconds of CPU (start-up under instrumentation): it yields the cores to the
        # calibration and the numerics checks. But its file is complete only once it ran, so it holds a share of the
        # slots while it waits (SANITIZER_SLOT_FLOOR) instead of queueing behind numerics that arrive all run long
        return [dataclasses.replace(t, env={**t.env, NICE_ENV: str(SANITIZER_NICE)}, slot_floor=SANITIZER_SLOT_FLOOR)
                if isinstance(t, CheckTask) else t for t in super().tasks(plan)]


class RecoveryStage(_GpuStage):
    name = "recovery"
    summary = "out-of-memory, then the same process must compute the same answer (GPU)"
    default = True
    # Exclusive (it fills the GPU's memory), after the runtime checks once no side-by-side work waits; its worker
    # retires unless the check passed, so the engine prestarts one worker more per implementation (verify/engine.py).
    order = 12
    target = "opgate.verify.oom_recovery:VerifyOomRecoveryCheck"
    timeout_s = 300.0
    exclusive = True
    # It fills the GPU's memory: its worker is reused only where the check passed, which showed that the process
    # computes the same answer again; each fresh worker cost FlagGems' recovery checks about 2.5 s on the H100
    retire_unless_passed = True
    title_text = "recovers from out-of-memory"


class NcuStage(_GpuStage):
    name = "ncu"
    summary = "Nsight Compute counters beside opgate's byte and occupancy models (GPU, opt-in)"
    order = 25
    needs = StageNeeds(gpu=True, tools=("ncu",), gpu_implementations=True, calibration=False)
    target = "opgate.verify.runtime:VerifyNcuCheck"
    timeout_s = 360.0  # the check gives ncu this less NCU_TEARDOWN_S (verify/runtime.py)
    exclusive = True
    title_text = "under Nsight Compute"

    def find_tool(self, tool: str) -> str | None:
        from opgate.gpu.probes.ncu import NcuNotFound, find_ncu

        try:
            return find_ncu()
        except NcuNotFound:
            return None


class QosStage(_GpuStage):
    name = "qos"
    summary = "p50/p95/p99 at perf_dims alone, time-sliced, high-priority stream, under MPS; the SLO (GPU, opt-in)"
    order = 26
    target = "opgate.verify.qos_stage:VerifyQosCheck"
    timeout_s = 240.0  # the check's measurement stops after VerifyQosCheck.budget_s (150 s): room for MPS's stop
    exclusive = True  # it saturates the GPU on purpose: nothing else may measure meanwhile
    title_text = "latency beside a neighbour (QoS)"
