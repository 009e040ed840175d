"""The child-process check: one implementation x one dtype, every case of the plan.

The parent wrote the cases, their float64 truth and their calibrated budgets to a plan file; this
check regenerates the inputs (deterministic), runs the implementation on each case, judges it,
shrinks the smallest failure, keeps IR artefacts, and returns one CheckResult whose figures show
the candidate's error beside its budget.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from opgate.engine import gpu_pause
from opgate.checks.base import Check, CheckContext
from opgate.model.results import CheckResult, Figure, Outcome, Threshold, slug
from opgate.core import dtypes as dt
from opgate.verify import bounds_device
from opgate.verify.backends import PreparedImplementation, autotune_choice, backend, prepare
from opgate.verify.backends.base import BackendLimitation, ImplementationChoice, find_choice
from opgate.verify.backends.interpreter_programs import counting as launched_programs
from opgate.verify.calibrate import (
    K_QUANTILE, K_RMSE, CalibrationError, CaseVerdict, OutputBudget, budgets_for_case, judge_case,
    output_names, truth_and_baseline,
)
from opgate.verify.compare import OutputStats
from opgate.verify.phase_clock import PhaseClock
from opgate.verify.deviations import (
    FLUSH_THRESHOLD, LOW_PRECISION_DTYPES, MAX_FLOAT32_RERUNS, NOT_REPRODUCED, Deviation, PrecisionFinding,
    shrinks_in_float32,
    bisect_breaking_scale, classify_failure, ftz_allowance, ftz_truth, input_magnitude, numeric_failure, precision_finding,
    PROMISED_MIN_MAGNITUDE, promised_magnitude, undefined_masks,
)
from opgate.gpu.judge.oom import OomFacts, exception_is_out_of_memory, judge_oom, requested_bytes
from opgate.gpu.probes.device_memory import device_memory_snapshot, free_cached_memory, held_by_this_process
from opgate.verify.gaming import PROBE_CALLS, apply_probe, prepare_probe, probe_implementation
from opgate.verify.gradients import gradient_failure_class, gradient_remediation
from opgate.verify.inputs import LARGE_CAP, Case, make_inputs
from opgate.verify.calibrator import REFERENCE_FORM_KEY
from opgate.verify.case_watchdog import CaseStopped, stopped_after
from opgate.verify.planfile import PlanFile
from opgate.verify.replay import ReplayToken
from opgate.verify.resume import CaseJournal
from opgate.verify.shrink import candidate_sizes, shrink_case
from opgate.core.spec import Operator
from opgate.verify.loaded_specs import loaded_operators
from opgate.verify.tasks import NumericsPayload
from opgate.verify.case_costs import CaseCostLog, MeasuredCost
from opgate.verify.time_budget import CasePlanFitter, CaseSize, budget_at_start

MAX_CASE_RECORDS_WITH_STATS = 8  # failing cases whose full statistics go into the JSON
BISECT_SHRINK_ATTEMPTS = 8  # dims shrunk before a range bisection under the interpreter (_bisect_shrunk)
NOT_JUDGED_REMEDIATION = ("Not a verdict on the implementation: opgate could not show the out-of-memory error was "
                          "its own demand (the reason says who held the GPU's memory; nvidia-smi lists the "
                          "processes). Run again when the memory is free, or give this run a GPU of its own "
                          "(CUDA_VISIBLE_DEVICES); opgate verify runs on one GPU already wait for each other's "
                          "recovery stage (docs/verify-engine.md, the GPU guard).")


@dataclass
class CaseRecord:
    case: Case
    verdict: CaseVerdict
    seconds: float = 0.0  # the implementation's call and the judging of this case
    backend_note: str = ""  # what the backend chose for this case (PreparedImplementation.case_note)

    def compact(self) -> dict[str, Any]:
        row: dict[str, Any] = {"case": self.case.label(), "passed": self.verdict.passed,
                               "budget_ratio": _num(self.verdict.ratio), "seconds": round(self.seconds, 4)}
        if self.backend_note:
            row["autotuned"] = self.backend_note
        if self.verdict.not_judged:
            row["not_judged"] = self.verdict.not_judged
        if self.verdict.reasons:
            row["reasons"] = list(self.verdict.reasons)
        outputs = []
        for stats, budget in zip(self.verdict.stats, self.verdict.budgets):
            outputs.append({
                "rmse": _num(stats.rmse), "rmse_budget": _num(budget.rmse),
                "p999": _num(stats.quantile_abs), "p999_budget": _num(budget.quantile),
                "max_abs": _num(stats.max_abs), "max_rel": _num(stats.max_rel), "ulp_max": _num(stats.ulp_max),
                "cosine": _num(stats.cosine), "sqnr_db": _num(stats.sqnr_db), "mismatches": stats.mismatches,
                "nonfinite_unexpected": stats.nonfinite_unexpected,
            })
        row["outputs"] = outputs
        return row


def _output_dtype_deviations(records: Sequence[CaseRecord], out_dtypes: Sequence[str]) -> list[Deviation]:
    """An output returned in a wider float dtype than the reference's (fla's float32 losses for float16 logits):
    judged after rounding to the reference's dtype, and said, since a caller may expect the reference's dtype."""
    wider: dict[int, str] = {}
    for record in records:
        for index, stats in enumerate(record.verdict.stats):
            if stats.wider_dtype:
                wider.setdefault(index, stats.wider_dtype)
    if not wider:
        return []
    names = output_names(len(out_dtypes))
    listed = ", ".join(f"{names[i]} in {got} (the reference: {out_dtypes[i]})" for i, got in sorted(wider.items()))
    return [Deviation("output_dtype", (
        f"returns {listed}; judged after rounding to the reference's dtype. If the wider dtype is the contract, make "
        "the reference return it (e.g. .float()) so its budget is calibrated for it"))]


def _with_capped_cases(result: CheckResult, fitter: CasePlanFitter, started_after_s: float = 0.0) -> CheckResult:
    """Say which cases the time budget left out, and their predicted cost, in the reason and the figures.
    `started_after_s`: the check started that long after its operator's calibration began, which shortened its
    budget (time_budget.budget_at_start); 0: it did not."""
    capped = fitter.summary()
    if capped is None:
        return result
    if started_after_s > 0:
        capped["started_after_s"] = started_after_s
    listed = ", ".join(f"{c['case']} (~{c['predicted_s']:g} s)" for c in capped["capped"][:3])
    more = f" and {len(capped['capped']) - 3} more" if len(capped["capped"]) > 3 else ""
    late = (f", what was left of the operator's when this check started {started_after_s:g} s into the operator's "
            "run" if started_after_s > 0 else "")
    stopped = [c for c in capped["capped"] if "stopped_after_s" in c]
    halted = (f"; {len(stopped)} of them stopped while running, past the budget ("
              + ", ".join(f"{c['case']} after {c['stopped_after_s']:g} s" for c in stopped[:3]) + ")"
              if stopped else "")
    past = capped.get("run_past_budget", [])
    beyond = (f"; {len(past)} case(s) ran past it to cover their regime x layout once ({', '.join(past[:3])}"
              f"{' and more' if len(past) > 3 else ''})" if past else "")
    note = (f"; {len(capped['capped'])} case(s) not run: they did not fit the {capped['budget_s']:g} s time budget"
            f"{late} at this backend's measured speed ({listed}{more}; --time-budget raises it){halted}{beyond}")
    figure = Figure("cases capped by the time budget", len(capped["capped"]), "",
                    Threshold(capped["budget_s"], ">=", "seconds of numerics this implementation x dtype may take "
                                                        "(a share of the operator's --time-budget)"),
                    key="verify.numerics.cases_capped_by_the_time_budget")
    # kept whole beside the figures: a crash's verdict replaces a passing reason and says this again
    capped["reason"] = note.removeprefix("; ")
    return dataclasses.replace(result, reason=result.reason + note, figures=tuple(result.figures) + (figure,),
                               extra={**result.extra, "time_budget": capped})


def _num(value: float) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    return value


# Regimes whose failures a range bisection can explain (an injected Inf/NaN often fails beside them).
RANGE_REGIMES = ("large", "huge", "mixed", "tiny", "nonfinite")


def _torch() -> Any:
    import torch

    return torch


def _held_before_the_check() -> int:
    """What this process's allocators hold as a check begins (device_memory.held_by_this_process); 0 where torch is
    not loaded yet (nothing held, and no import for it) or cannot say."""
    torch = sys.modules.get("torch")
    if torch is None:
        return 0
    try:
        return held_by_this_process(torch)
    except Exception:  # a context an earlier check broke: the case's own error says so
        return 0


def _limitations(reasons: Sequence[str]) -> list[BackendLimitation]:
    """The backend limitations a case's reasons name, when they are all it failed for (else empty)."""
    found = [BackendLimitation.from_reason(r) for r in reasons]
    return [f for f in found if f is not None] if found and all(f is not None for f in found) else []


# An error that refuses an input's memory layout states a requirement about it: FlagGems' rotary embedding ("cos must
# be contiguous at the last dimension"), a CUDA extension's TORCH_CHECK(x.is_contiguous(), "x must be contiguous").
# An error the layout provokes by accident does not, even when it names strides: PyTorch's "view size is not
# compatible with input tensor's size and stride ... Use .reshape(...)" is a crash of the implementation on a view.
LAYOUT_WORDS = ("contiguous", "stride")
REQUIREMENT_WORDS = ("must", "expect", "require", "only support", "not supported", "unsupported", "is not contiguous",
                     "non-contiguous", "not contiguous")
ACCIDENTAL_LAYOUT_ERRORS = ("view size is not compatible",)


def _is_layout_refusal(reason: str) -> bool:
    text = reason.lower()
    return (reason.startswith("raised") and any(w in text for w in LAYOUT_WORDS)
            and any(w in text for w in REQUIREMENT_WORDS) and not any(w in text for w in ACCIDENTAL_LAYOUT_ERRORS))


def _refuses_layout(record: "CaseRecord") -> bool:
    """A case in a layout opgate chose (not contiguous) that only raised, every time with an error stating a layout
    requirement: the implementation refuses the layout, it does not compute it wrong."""
    reasons = record.verdict.reasons
    return record.case.layout != "contiguous" and bool(reasons) and all(_is_layout_refusal(r) for r in reasons)


def _raise_signature(reason: str) -> str:
    """An error's type and message without its numbers: the same error at other sizes reads the same."""
    return re.sub(r"\d+", "#", reason)[:120]


def _size_limited(failing: Sequence["CaseRecord"], records: Sequence["CaseRecord"],
                  dims: Mapping[str, Sequence[int]]) -> list["CaseRecord"]:
    """The failing cases a size limit explains: each only raised, on a size opgate added (empty, or above every
    declared size of a dimension), and not for a reason other than its size. The reason is another when the same
    error (its words, numbers aside) fails a case of a smaller size, or when the case's layout is not contiguous and
    a contiguous case of the same sizes passed: unsloth's cross-entropy raised "view size is not compatible" on
    transposed labels at B=2, S=2, V=1 (a crash) and at B=3, S=13, V=192 (then excused as a size limit)."""
    declared_max = {dim: max(sizes) for dim, sizes in dims.items()}

    def raised_only(record: "CaseRecord") -> bool:
        return bool(record.verdict.reasons) and all(x.startswith("raised") for x in record.verdict.reasons)

    candidates = [r for r in failing if raised_only(r) and r.case.origin != "declared"
                  and any(size > declared_max.get(dim, size) or size == 0 for dim, size in r.case.dims)]
    at_other_sizes = {_raise_signature(x) for r in failing if r not in candidates for x in r.verdict.reasons}
    passed_contiguous = {r.case.dims for r in records if r.verdict.passed and r.case.layout == "contiguous"}
    return [r for r in candidates
            if not any(_raise_signature(x) in at_other_sizes for x in r.verdict.reasons)
            and not (r.case.layout != "contiguous" and r.case.dims in passed_contiguous)]


def _limitation_deviations(limited: Sequence["CaseRecord"], n_cases: int) -> list[Deviation]:
    """One deviation per class of backend limitation, naming its first construct and how many cases it stopped."""
    by_class: dict[str, list[BackendLimitation]] = {}
    for record in limited:
        for limitation in _limitations(record.verdict.reasons)[:1]:
            by_class.setdefault(limitation.deviation, []).append(limitation)
    deviations = []
    for kind, found in by_class.items():
        constructs = list(dict.fromkeys(f.what for f in found))
        more = f" (and {len(constructs) - 1} other construct(s))" if len(constructs) > 1 else ""
        deviations.append(Deviation(kind, f"{len(found)}/{n_cases} case(s) cannot be judged here: {constructs[0]}"
                                          f"{more}; {found[0].remedy}"))
    return deviations


def _find_op(ops: Sequence[Operator], name: str) -> Operator:
    for op in ops:
        if op.name == name:
            return op
    raise RuntimeError(f"operator {name!r} is no longer defined by the spec file")


def with_window_pause(result: CheckResult, began_at: float) -> CheckResult:
    """`result` with the seconds the run's measurement windows paused it since `began_at` (an epoch), where there
    were any: its duration_s and phase_s stay wall time, and this says how much of that was waiting."""
    paused = gpu_pause.window_seconds_since(began_at)
    if paused <= 0:
        return result
    return dataclasses.replace(result, extra={**result.extra, "paused_in_windows_s": round(paused, 1)})


def _form_mismatch(output: Any, reference_returns_tensor: bool | None) -> str:
    """A reason when the implementation returns another form than the reference (a tuple of one tensor for a
    one-tensor op, or the reverse); "" when the forms agree or one is not known."""
    if output.single is None or reference_returns_tensor is None or output.single == reference_returns_tensor:
        return ""
    count = len(output.outputs)
    got = "one tensor" if output.single else f"a tuple or list of {count} output(s)"
    want = "one tensor" if reference_returns_tensor else "a tuple or list"
    return (f"returned {got} where the reference returns {want}: a caller's `y = op(x)` gets another type; return "
            "the form the reference returns")


class VerifyImplementationCheck(Check):
    """One implementation of one operator in one dtype, over the whole case plan."""

    reference_returns_tensor: bool | None = None  # from the plan (calibrator.reference_form); None: not known
    verbs = ("verify",)
    levels = ("quick", "standard", "thorough")

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        task = NumericsPayload.from_dict(ctx.options)
        clock = PhaseClock()
        began_at = time.time()  # the measurement windows since then paused this check (extra["paused_in_windows_s"])
        # a crash on a case becomes that case's verdict (resume.py)
        self.journal = CaseJournal(Path(task.workdir) / "journal", task.case_timeout_s)
        self.oom_events: list[dict[str, Any]] = []  # out-of-memory errors met in cases, and what became of them
        self.held_before = _held_before_the_check()  # a warm worker's leftovers: no case's demand
        plan = PlanFile.load(Path(task.plan_path))
        self.reference_returns_tensor = plan.summary.get(REFERENCE_FORM_KEY)  # None: a plan that did not record it
        op = _find_op(loaded_operators(task.spec_file), task.op)
        choice = find_choice(op, task.impl, task.extras)
        prepared = prepare(choice, op, plan.dtype, Path(task.workdir))
        try:
            return with_window_pause(self._judge(task, clock, plan, op, choice, prepared), began_at)
        finally:
            self.journal.close()
            if prepared.release is not None:
                prepared.release()

    def _judge(self, task: NumericsPayload, clock: PhaseClock, plan: PlanFile, op: Operator,
               choice: ImplementationChoice, prepared: PreparedImplementation) -> CheckResult:
        """Run the plan's cases and judge them: the verdict, its class, deviations, a shrunk case."""
        clock.lap("load and prepare")
        # the bound terms this check computes itself (deferred cases, the gaming probe's second case: 25-33 s of
        # float64 reverse passes per dtype on one CPU for fla's large gradient twins) may use its GPU, as the
        # calibration's do (a spec that replaced aten's GPU kernels keeps them on the CPU: verify/bounds_device.py)
        bounds_device.use_gpu(prepared.device.startswith("cuda"))
        # the run's measurement windows since the operator's calibration began paused its work: not its budget's
        now = time.time() - (gpu_pause.window_seconds_since(task.operator_began_at) if task.operator_began_at else 0.0)
        budget_s, started_after_s = budget_at_start(task.time_budget_s, task.share_s, task.operator_budget_s,
                                                    task.operator_began_at, now)
        # what each case costs, shared with this implementation's checks of the other dtypes (verify/case_costs.py)
        case_costs = CaseCostLog(Path(task.case_costs_path) if task.case_costs_path else None, plan.dtype)
        fitter = self._fitter(op, plan, budget_s, per_call=prepared.device.startswith("cuda"),
                              measured_elsewhere=case_costs.others,
                              interpreted=choice if prepared.facts.get("interpreter") else None)
        # the gaming probe's float64 side first, on the fitter's clock, and room kept for its calls after the
        # cases: the check as a whole, not only its cases, keeps to its time budget
        probe_truths = prepare_probe(op, choice, plan, smallest=not fitter.timer.per_call,
                                     budgets_of=lambda index: self._deferred_budgets(op, plan, index))
        if probe_truths is not None and not probe_truths.skipped:
            fitter.reserve = (plan.cases.index(probe_truths.case), PROBE_CALLS)
        clock.lap("gaming probe truths")
        records = self._run_plan(op, prepared, plan, fitter, case_costs)
        clock.lap("cases")
        # verify/gaming.py: cache, alias, mutation, stream. Not after a crash: the probe calls the implementation
        # outside any case, and a second death there would read as opgate's own.
        gaming = (probe_implementation(op, choice, prepared, plan, probe_truths)
                  if probe_truths is not None and not self.journal.crashed_labels
                  and not getattr(self.journal, "not_run", None) else None)
        clock.lap("gaming probe")
        if prepared.finish is not None:
            prepared.finish()
        artefacts = self._artefacts(prepared, Path(task.artefact_dir))
        failing = [r for r in records if not r.verdict.passed and not r.verdict.not_judged]
        kept, rerunnable = self.journal.split_failing(failing)  # a crashed case is never run again in-process
        remaining, deviations, range_note = self._explain_deviations(op, prepared, plan, rerunnable, records)
        failing = kept + remaining
        deviations = deviations + _output_dtype_deviations(records, plan.out_dtypes)
        clock.lap("deviations")
        shrunk = None
        if remaining and task.shrink:
            shrunk = self._shrink(op, prepared, plan, remaining, fitter.shrink_deadline())
            clock.lap("shrink")
        failure_class = classify_failure([(r.case, r.verdict.reasons, r.verdict.stats)
                                          for r in self.journal.not_crashed(failing)], op.dims) if failing else ""
        if range_note and failure_class in ("nonfinite", "typical") and all(
                r.case.regime in RANGE_REGIMES for r in failing):
            failure_class = "range"  # the bisection placed the break inside the promised range
        precision = self._precision_finding(op, prepared, plan, failing, failure_class) if failing else None
        if precision is not None:
            failure_class = "precision"  # rounding against eager, forward or backward: a finding, not a wrong formula
        elif failing and gradient_failure_class(op):
            failure_class = gradient_failure_class(op)  # a derived <op>.grad (verify/gradients.py): a wrong backward
        result = apply_probe(self._result(op, choice, prepared, plan, records, failing, shrunk, artefacts, task,
                                          deviations, failure_class, range_note, precision), gaming)
        if precision is not None:
            result = dataclasses.replace(result, extra={**result.extra, "precision": precision.to_dict()})
        result = dataclasses.replace(result, extra={**result.extra, "phase_s": clock.laps,
                                                    **({"out_of_memory": self.oom_events} if self.oom_events else {})})
        result = _with_capped_cases(result, fitter, started_after_s)
        return self.journal.annotate(
            result, len(plan.cases), sum(1 for r in records if r.case.label() not in self.journal.crashed_labels),
            lambda case: ReplayToken(op.name, choice.name, plan.dtype, case, plan.budget, plan.base_seed).encode(),
            Path(task.spec_file).name)

    def _run_plan(self, op: Operator, prepared: PreparedImplementation, plan: PlanFile, fitter: CasePlanFitter,
                  case_costs: CaseCostLog) -> list[CaseRecord]:
        """Every case of the plan that fits the time budget (verify/time_budget.py), run in the fitter's order (each
        kind of case first); cases an earlier (crashed) child finished or crashed on come from the journal. The
        records are in plan order."""
        records: dict[int, CaseRecord] = {}
        pending: list[int] = []
        for index, (case, budgets) in enumerate(zip(plan.cases, plan.budgets)):
            state, earlier = self.journal.state_of(index)
            if state == "done":
                records[index] = earlier
                fitter.observe(index, getattr(earlier, "seconds", 0.0))
            elif state == "crashed":
                records[index] = CaseRecord(case, CaseVerdict(False, (earlier,), (), tuple(budgets)))
            elif state == "not_judged":  # an earlier child hung in a JIT compile of this case (verify/resume.py)
                records[index] = CaseRecord(case, CaseVerdict(False, (), (), tuple(budgets), not_judged=earlier))
            elif state == "run":
                pending.append(index)
        while pending:
            index = fitter.next_case(pending)
            pending.remove(index)
            if not fitter.runs(index):
                continue
            case, truth, budgets, masks = plan.cases[index], plan.truths[index], plan.budgets[index], plan.masks[index]
            began = gpu_pause.clock()  # a wait in a measurement window is not the case's time
            case_costs.started(case.label(), dims=case.dims)  # the other dtypes' checks see it running
            if not budgets:  # deferred by the calibration (calibrate.bounds_until_deferred): computed here
                budgets, masks = self._deferred_budgets(op, plan, index)
            # under the interpreter a case far past its prediction is stopped once the budget is spent (the time
            # goes into Python there; a compiled kernel's goes into a C call, which nothing can cut short)
            limit = fitter.stop_after_s(index) if prepared.facts.get("interpreter") else None
            try:
                with stopped_after(limit), launched_programs() as launched:
                    verdict = self._run_case(op, prepared, plan.dtype, case, truth, budgets, plan.out_dtypes, masks,
                                             index=index)
            except CaseStopped:
                ran_s = gpu_pause.clock() - began
                fitter.stopped(index, ran_s)
                case_costs.record(case.label(), ran_s, stopped=True, dims=case.dims)
                continue
            except BaseException:  # the check ends here; its warm worker lives on, so the case must not read running
                case_costs.record(case.label(), gpu_pause.clock() - began, stopped=True, dims=case.dims)
                raise
            note = prepared.case_note() if prepared.case_note is not None else ""
            records[index] = CaseRecord(case, verdict, gpu_pause.clock() - began, note)
            fitter.observe(index, records[index].seconds,
                           launched["programs"] if prepared.facts.get("interpreter") else None)
            case_costs.record(case.label(), records[index].seconds, dims=case.dims)
            self.journal.save(index, records[index])
        return [records[index] for index in sorted(records)]

    def _fitter(self, op: Operator, plan: PlanFile, budget_s: float, per_call: bool,
                measured_elsewhere: Callable[[], Mapping[str, MeasuredCost]],
                interpreted: ImplementationChoice | None = None) -> CasePlanFitter:
        """The plan's time budget; `interpreted`: the implementation, where it runs under Triton's interpreter (its
        cases' programs are counted in dry runs: verify/backends/interpreter_programs.py)."""
        from opgate.verify.time_budget import CaseTimer

        programs = [0] * len(plan.cases)
        if interpreted is not None and budget_s > 0:  # there a case's cost follows its programs
            from opgate.verify.backends.interpreter_programs import plan_programs

            programs = plan_programs(op, interpreted, plan.dtype, plan.cases, gpu_pause.clock)
        sizes = []
        for case, count in zip(plan.cases, programs):
            dims = op.with_derived({k: v for k, v in case.dims if k not in op.derived_dims})
            sizes.append(CaseSize.of([spec.concrete_shape(dims) for spec in op.tensor_inputs], count))
        return CasePlanFitter(budget_s, plan.cases, sizes, gpu_pause.clock, CaseTimer(per_call=per_call),
                              measured_elsewhere=measured_elsewhere)

    # -- deviations -----------------------------------------------------------------------------------
    def _explain_deviations(self, op: Operator, prepared: PreparedImplementation, plan: PlanFile,
                            failing: list[CaseRecord], records: Sequence[CaseRecord]
                            ) -> tuple[list[CaseRecord], list[Deviation], str]:
        """Take out of `failing` what a documented deviation explains; say what remains a range bug. `records`: every
        case judged (the size limit asks whether a contiguous case of the same sizes passed)."""
        deviations: list[Deviation] = []
        if not failing:
            return failing, deviations, ""
        # cases the backend cannot run here (a construct Triton's interpreter lacks): not judged, never the verdict;
        # the other cases' failures, if any, still stand
        limited = [r for r in failing if _limitations(r.verdict.reasons)]
        if limited:
            failing = [r for r in failing if r not in limited]
            deviations += _limitation_deviations(limited, len(plan.cases))
        if not failing:
            return failing, deviations, ""
        limitations = backend(prepared.choice.backend).interpreter_limitations(prepared, plan.dtype)
        if limitations:
            deviations.append(Deviation("interpreter", (
                f"{len(failing)} case(s) fail in {plan.dtype} under the {prepared.choice.backend} backend's CPU "
                f"interpreter, which cannot compute {', '.join(limitations)} in {plan.dtype} exactly; not judged "
                "here: the GPU run decides")))
            return [], deviations, ""
        too_big = _size_limited(failing, records, op.dims)
        if too_big:
            deviations.append(Deviation("size_limit", (
                f"raises on {len(too_big)} size(s) opgate added (empty tensors, or above every declared size), where "
                f"the reference returns a result (e.g. {too_big[0].case.label()}: {too_big[0].verdict.reasons[0][:160]}); "
                "support them, or declare the supported sizes")))
            failing = [r for r in failing if r not in too_big]
        refused = [r for r in failing if _refuses_layout(r)]
        if refused and any(c.layout == "contiguous" for c in plan.cases):
            deviations.append(Deviation("layout_limit", (
                f"refuses {len(refused)} case(s) in a non-contiguous layout opgate chose, with an explicit error "
                f"(e.g. {refused[0].case.label()}: {refused[0].verdict.reasons[0][:160]}); a caller with such a "
                "view gets that error, not a wrong answer; declare TensorSpec(contiguous=True) on the inputs it needs "
                "contiguous, or make them contiguous in the implementation")))
            failing = [r for r in failing if r not in refused]
        if op.subnormals != "exact":
            flushed_ok = [r for r in failing if self._explained_by_ftz(op, prepared, plan, r)]
            if flushed_ok:
                deviations.append(Deviation("ftz", (
                    f"{len(flushed_ok)} case(s) match the truth with float32 subnormals flushed to zero (-ftz=true / "
                    f"--use_fast_math), e.g. {flushed_ok[0].case.label()}; values below {FLUSH_THRESHOLD:.3g} come "
                    "out as 0; set subnormals=\"exact\" in the spec to make this a failure")))
                failing = [r for r in failing if r not in flushed_ok]
        notes: list[str] = []
        for side, regimes in (("high", ("large", "huge", "mixed")), ("low", ("tiny",))):
            group = [r for r in failing if r.case.regime in regimes]
            if not group or (side == "low" and op.subnormals == "exact"):  # exact: tiny values must be right too
                continue
            verdict = self._bisect_range(op, prepared, plan, group, side)
            if verdict is None:
                continue
            magnitude, promised, bisected = verdict
            outside = magnitude > promised if side == "high" else magnitude < promised
            where = "above" if side == "high" else "below"
            how = "(bisected)" if bisected else (
                f"(the median |x| of the failing case{'s' if len(group) > 1 else ''}; typical values scaled to the "
                "dtype's range pass)")
            if outside:
                deviations.append(Deviation("range_limit", (
                    f"breaks only at inputs of |x| {'>=' if side == 'high' else '<='} {magnitude:.3g} {how}, far "
                    f"{where} the {promised:.3g} the inputs' kind promises (TensorSpec max_magnitude=); "
                    + ("an intermediate such as x^2 or a long sum overflows float32 there" if side == "high" else
                       "an intermediate such as x^2 underflows to zero there"))))
                failing = [r for r in failing if r not in group]
            else:
                notes.append(f"breaks at inputs of |x| {'>=' if side == 'high' else '<='} {magnitude:.3g} {how}, "
                             f"inside the range the inputs' kind promises ({where} {promised:.3g} is outside)")
        range_note = "; ".join(notes)
        return failing, deviations, range_note

    def _explained_by_ftz(self, op: Operator, prepared: PreparedImplementation, plan: PlanFile,
                          record: CaseRecord) -> bool:
        if record.case.regime in ("large", "huge"):
            # huge inputs make tiny outputs only through an overflow (x^2 -> inf, rstd -> 0): a range question, and
            # the FTZ allowance ((fan-in + 1) x 2^-126) would excuse any output below 1e-34 there
            return False
        truth = ftz_truth(op, record.case, plan.dtype)
        if truth is None:
            return False
        index = plan.cases.index(record.case) if record.case in plan.cases else -1
        budgets = plan.budgets[index] if index >= 0 else record.verdict.budgets
        masks = plan.masks[index] if index >= 0 else [None] * len(truth)
        fan_in = max((b.fan_in for b in budgets), default=1)
        verdict = self._run_case(op, prepared, plan.dtype, record.case, truth, budgets, plan.out_dtypes, masks,
                                 extra_atol=ftz_allowance(fan_in))
        return verdict.passed

    def _bisect_range(self, op: Operator, prepared: PreparedImplementation, plan: PlanFile,
                      group: Sequence[CaseRecord], side: str) -> tuple[float, float, bool] | None:
        """The input magnitude where the implementation starts failing (typical values scaled up, or down for
        side "low"), beside the magnitude the inputs promise on that side, and whether it was bisected (False:
        scaled typical values never failed, and the magnitude is the median |x| of the failing cases' inputs,
        returned only when it lies outside the promise)."""
        case = group[0].case
        if side == "high":
            far = (min(math.sqrt(dt.max_finite(plan.dtype)) / 4, LARGE_CAP) if case.regime == "large"
                   else dt.max_finite(plan.dtype) / 64)
        else:
            far = dt.smallest_normal(plan.dtype) * 2

        def at(scale: float, dims: tuple[tuple[str, int], ...] = case.dims) -> Case:
            return Case(dims, case.seed, "magnitude", case.layout, "bisect", scale)

        answers: dict[tuple[tuple[tuple[str, int], ...], float], bool] = {}

        def fails(scale: float, dims: tuple[tuple[str, int], ...] = case.dims) -> bool:
            if (dims, scale) not in answers:  # each call under the interpreter costs seconds at a large size
                answers[dims, scale] = self._case_fails(op, prepared, plan, at(scale, dims))
            return answers[dims, scale]

        promised = promised_magnitude(op, plan.dtype) if side == "high" else PROMISED_MIN_MAGNITUDE
        if prepared.facts.get("interpreter"):
            shrunk = self._bisect_shrunk(op, case.dims, at, fails, far, promised, side, plan.dtype)
            if shrunk is not None:
                return shrunk
        scale = bisect_breaking_scale(fails, 1.0, far)
        if scale is None:
            return None
        if scale == NOT_REPRODUCED:  # where the bulk of the failing cases' inputs lies (deviations.NOT_REPRODUCED)
            magnitudes = [input_magnitude(op, r.case, plan.dtype, typical=True) for r in group]
            magnitude = min(magnitudes) if side == "high" else max(magnitudes)
            outside = magnitude > promised if side == "high" else magnitude < promised
            return (magnitude, promised, False) if outside else None  # inside: not a range effect, as before
        return input_magnitude(op, at(scale), plan.dtype), promised, True

    def _bisect_shrunk(self, op: Operator, dims: tuple[tuple[str, int], ...], at: Callable[..., Case],
                       fails: Callable[..., bool], far: float, promised: float, side: str,
                       dtype: str) -> tuple[float, float, bool] | None:
        """The bisection at the failing case shrunk, where it breaks the same way: under Triton's interpreter a call
        at that case's size costs seconds, and a bisection makes 16 (attorch's Softplus at M=64, N=4096: 12.8 s a
        call, 176 s of one check, fortieth session). The original size is called at most three times: passing at
        the typical scale and failing at `far` (the bisection's ends, which it reuses), and once at the promised
        magnitude, which decides on which side of the promise it breaks there. The shrunk bisection's answer stands
        only where that side agrees; None: bisect at the original size, as before. `fails(scale, dims)`."""
        if fails(1.0) or not fails(far):
            return None  # no range effect, or not reproduced: the bisection says so at once

        def first_dim_shrunk(current: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...] | None:
            for dim, size in current:  # the first dim that can shrink, to its smallest size (shrink.py's order)
                sizes = candidate_sizes(op, dim, size)
                if sizes:
                    return tuple((d, sizes[0] if d == dim else s) for d, s in current)
            return None

        smaller = dims
        for _ in range(BISECT_SHRINK_ATTEMPTS):
            trial = first_dim_shrunk(smaller)
            if trial is None or fails(1.0, trial) or not fails(far, trial):
                break
            smaller = trial
        if smaller == dims:
            return None
        scale = bisect_breaking_scale(lambda s: fails(s, smaller), 1.0, far)
        if scale is None or scale == NOT_REPRODUCED:
            return None
        magnitude = input_magnitude(op, at(scale, smaller), dtype)
        outside = magnitude > promised if side == "high" else magnitude < promised
        promised_scale = promised / max(input_magnitude(op, at(1.0), dtype), 1e-300)
        if (promised_scale <= 1.0) if side == "high" else (promised_scale >= 1.0):
            inside_at_size = False  # it passes at scale 1, beyond the promise already
        elif (promised_scale >= far) if side == "high" else (promised_scale <= far):
            inside_at_size = True  # it fails at `far`, within the promise
        else:
            inside_at_size = fails(promised_scale)
        return (magnitude, promised, True) if outside != inside_at_size else None

    # -- precision ----------------------------------------------------------------------------------
    def _precision_finding(self, op: Operator, prepared: PreparedImplementation, plan: PlanFile,
                           failing: list[CaseRecord], failure_class: str) -> PrecisionFinding | None:
        """A finding when every failing case misses its budget by a figure (no NaN, crash or unwritten element) and
        the miss is rounding: the class rules call it precision, or the same implementation given the same values in
        float32 passes these cases (its formula is right; the dtype's rounding fails it). None otherwise."""
        if not all(numeric_failure(r.verdict.reasons) for r in failing) or failure_class == "layout":
            return None
        rerun = self._float32_rerun(op, prepared, plan, failing)
        # "shrinks": still over budget in float32 but by a small share of the dtype's error, so the failure is the
        # dtype's rounding wherever the size rules blamed a tail mask or a formula (cut-cross-entropy's target logit
        # from float16 products, against a float32 log-sum-exp: a loss of 3e-3 where V = 1 makes the truth 0)
        if failure_class != "precision" and rerun != "passes" and not (
                rerun == "shrinks" and failure_class in ("tail", "typical")):
            return None
        return precision_finding([(r.case, r.verdict) for r in failing], plan.cases, plan.dtype, plan.out_dtypes,
                                 op.dims, rerun)

    def _float32_rerun(self, op: Operator, prepared: PreparedImplementation, plan: PlanFile,
                       failing: list[CaseRecord]) -> str:
        """Run the worst failing case of each regime (MAX_FLOAT32_RERUNS at most) again on the same values upcast to
        float32, judged against the same budgets: "passes"; "shrinks" where some fail but each output's largest and
        RMS error fall FLOAT32_SHRINK times or more below the dtype's in every case run (shrinks_in_float32);
        "fails"; "raised <error>"; or "" where the dtype is not narrower than float32."""
        import torch

        if plan.dtype not in LOW_PRECISION_DTYPES:
            return ""
        narrow = dt.torch_dtype(plan.dtype)
        out_dtypes = ["float32" if d == plan.dtype else d for d in plan.out_dtypes]
        chosen: dict[str, CaseRecord] = {}
        for record in sorted(failing, key=lambda r: -r.verdict.ratio):
            if record.case in plan.cases:
                chosen.setdefault(record.case.regime, record)
        if not chosen:
            return ""
        outcome = "passes"
        for record in list(chosen.values())[:MAX_FLOAT32_RERUNS]:
            index = plan.cases.index(record.case)
            generated = make_inputs(op, record.case, plan.dtype)
            values = [v.to(torch.float32) if isinstance(v, torch.Tensor) and v.dtype == narrow else v
                      for v in generated.values]
            out_specs = [(tuple(t.shape), d) for t, d in zip(plan.truths[index], out_dtypes)]
            try:
                with self.journal.implementation_call(record.case, None):
                    output = prepared.run(values, generated.layout_applied, out_specs)
            except Exception as exc:  # a kernel written for the dtype alone: no evidence either way
                return f"raised {type(exc).__name__}"
            verdict = judge_case(output.outputs, plan.truths[index], plan.budgets[index], out_dtypes,
                                 plan.masks[index], op.quantized, output.unwritten, nan_policy=op.nan_policy,
                                 nan_for_infinity=record.case.regime == "nonfinite")
            if verdict.passed:
                continue
            if not shrinks_in_float32(record.verdict.stats, verdict.stats):
                return "fails"
            outcome = "shrinks"
        return outcome

    # -- running ------------------------------------------------------------------------------------
    def _run_case(self, op: Operator, prepared: PreparedImplementation, dtype: str, case: Case,
                  truth: Sequence[Any], budgets: Sequence[OutputBudget], out_dtypes: Sequence[str],
                  masks: Sequence[Any], extra_atol: float = 0.0, index: int | None = None,
                  oom_retry: bool = True) -> CaseVerdict:
        generated = make_inputs(op, case, dtype)
        out_specs = [(tuple(t.shape), out_dtype) for t, out_dtype in zip(truth, out_dtypes)]
        oom_message = ""
        try:
            with self.journal.implementation_call(case, index):
                output = prepared.run(generated.values, generated.layout_applied, out_specs)
        except Exception as exc:
            limitation = prepared.limitation_of(exc) if prepared.limitation_of is not None else None
            if limitation is not None:  # the backend's limit here (Triton's interpreter), not the implementation's
                return CaseVerdict(False, (limitation.reason(),), (), tuple(budgets))
            lines = traceback.format_exception_only(type(exc), exc)
            message = " ".join(lines[-1].split())[:300]
            if not exception_is_out_of_memory(exc):
                return CaseVerdict(False, (f"raised {message}",), (), tuple(budgets))
            oom_message = message  # handled below, outside this block: its traceback holds the call's tensors
        if oom_message:
            del generated
            if oom_retry:  # once, with this process's cached memory given back
                event: dict[str, Any] = {"case": case.label(), "error": oom_message}
                self.oom_events.append(event)
                free_cached_memory(_torch())
                verdict = self._run_case(op, prepared, dtype, case, truth, budgets, out_dtypes, masks, extra_atol,
                                         index, oom_retry=False)
                event.setdefault("retry", "ran: the case was judged")
                return verdict
            return self._judge_out_of_memory(case, budgets, oom_message, index)
        form = _form_mismatch(output, self.reference_returns_tensor)
        if form:
            return CaseVerdict(False, (form,), (), tuple(budgets))
        return judge_case(output.outputs, truth, budgets, out_dtypes, masks, op.quantized, output.unwritten,
                          undefined=undefined_masks(op, case, dtype, out_dtypes, truth), nan_policy=op.nan_policy,
                          extra_atol=extra_atol, unwritten_spans=output.unwritten_spans,
                          nan_for_infinity=case.regime == "nonfinite")

    def _deferred_budgets(self, op: Operator, plan: PlanFile, index: int) -> tuple[list[OutputBudget], list[Any]]:
        """A case's budgets the calibration deferred, with the plan's pooled figures (as a shrunk case's), kept in
        the plan for the rest of the check."""
        case = plan.cases[index]
        _, baseline = truth_and_baseline(op, case, plan.dtype)
        budgets, masks, _ = budgets_for_case(op, plan.dtype, case, plan.truths[index], baseline, plan.pooled_rmse,
                                             plan.pooled_quantile, plan.n_calibration_cases,
                                             plan.summary.get("pooled_element_rho", ()))
        plan.budgets[index], plan.masks[index] = budgets, masks
        return budgets, masks

    def _case_fails(self, op: Operator, prepared: PreparedImplementation, plan: PlanFile, case: Case) -> bool:
        try:
            truth, baseline = truth_and_baseline(op, case, plan.dtype)
        except CalibrationError:
            return False  # the reference cannot do this case: not a smaller failure of the candidate
        budgets, masks, out_dtypes = budgets_for_case(op, plan.dtype, case, truth, baseline, plan.pooled_rmse,
                                                      plan.pooled_quantile, plan.n_calibration_cases,
                                                      plan.summary.get("pooled_element_rho", ()))
        verdict = self._run_case(op, prepared, plan.dtype, case, truth, budgets, out_dtypes, masks)
        # a case opgate could not judge (out of memory not its own, a backend's limitation) shows no failure
        return not verdict.passed and not verdict.not_judged and not _limitations(verdict.reasons)

    def _judge_out_of_memory(self, case: Case, budgets: Sequence[OutputBudget], message: str,
                             index: int | None = None) -> CaseVerdict:
        """The retry ran out of memory too: a failure only where the demand was the implementation's own
        (opgate.gpu.judge.oom), else a case opgate could not judge. `index`: the case's place in the plan (None
        beyond it), which the runner's follow-up reads to run the case again with the GPU to itself
        (verify/resume.py)."""
        torch = _torch()
        try:
            snapshot = device_memory_snapshot(torch)
            unmeasured = "" if snapshot is not None else "no CUDA device is visible to torch in this process"
        except Exception as exc:  # the memory query itself failed: nothing to show the demand was the implementation's
            snapshot, unmeasured = None, f"{type(exc).__name__}: {exc}"
        facts = None if snapshot is None else OomFacts(
            snapshot.free_bytes, snapshot.total_bytes, max(0, snapshot.own_bytes - self.held_before),
            requested_bytes(message),
            tuple(p.pid for p in snapshot.other_processes),
            sum(p.used_bytes or 0 for p in snapshot.other_processes) if snapshot.other_processes else None)
        verdict = judge_oom(facts, unmeasured)
        event = {"case": case.label(), "index": index, "error": message, "retry": "out of memory again",
                 "cause": verdict.cause, "detail": verdict.detail,
                 "memory": snapshot.to_dict() if snapshot is not None else None}
        if self.oom_events and self.oom_events[-1]["case"] == case.label() and "retry" not in self.oom_events[-1]:
            self.oom_events[-1].update(event)
        else:
            self.oom_events.append(event)
        if verdict.judged:
            return CaseVerdict(False, (f"raised {message} (out of memory again after a retry; {verdict.detail})",),
                               (), tuple(budgets))
        return CaseVerdict(False, (), (), tuple(budgets), not_judged=f"out of memory twice ({message[:160]}); "
                                                                     f"{verdict.detail}")

    def _shrink(self, op: Operator, prepared: PreparedImplementation, plan: PlanFile,
                failing: list[CaseRecord], deadline: float | None = None) -> dict[str, Any]:
        """The smallest failing case from the smallest one that failed, attempts starting until `deadline`
        (time.monotonic(); None: no limit)."""
        start = min(failing, key=lambda r: (math.prod(v for _, v in r.case.dims), r.case.seed))
        result = shrink_case(op, start.case, lambda c: self._case_fails(op, prepared, plan, c),
                             time_up=lambda: deadline is not None and time.monotonic() >= deadline)
        case = result.case
        if case is start.case:
            verdict = start.verdict
        else:
            truth, baseline = truth_and_baseline(op, case, plan.dtype)
            budgets, masks, out_dtypes = budgets_for_case(op, plan.dtype, case, truth, baseline,
                                                          plan.pooled_rmse, plan.pooled_quantile,
                                                          plan.n_calibration_cases,
                                                      plan.summary.get("pooled_element_rho", ()))
            verdict = self._run_case(op, prepared, plan.dtype, case, truth, budgets, out_dtypes, masks)
        token = ReplayToken(op.name, prepared.choice.name, plan.dtype, case, plan.budget, plan.base_seed).encode()
        return {"case": case, "verdict": verdict, "attempts": result.attempts, "steps": result.steps,
                "from": start.case.label(), "token": token}

    def _artefacts(self, prepared: PreparedImplementation, folder: Path) -> list[str]:
        if prepared.collect_artefacts is None:
            return []
        try:
            return prepared.collect_artefacts(folder)
        except OSError as exc:
            prepared.notes.append(f"could not write artefacts to {folder}: {exc}")
            return []

    # -- the result ---------------------------------------------------------------------------------
    def _result(self, op: Operator, choice: ImplementationChoice, prepared: PreparedImplementation, plan: PlanFile,
                records: list[CaseRecord], failing: list[CaseRecord], shrunk: dict[str, Any] | None,
                artefacts: list[str], task: NumericsPayload, deviations: Sequence[Deviation] = (),
                failure_class: str = "", range_note: str = "",
                precision: PrecisionFinding | None = None) -> CheckResult:
        n = len(records)
        unjudged = [r for r in records if r.verdict.not_judged]
        stalled_labels = getattr(self.journal, "stalled_labels", set())
        stalled = [r for r in unjudged if r.case.label() in stalled_labels]  # a JIT compile that hung
        worst = max([r for r in records if not r.verdict.not_judged] or records, key=lambda r: r.verdict.worst_ratio)
        figures = [Figure("failing cases", len(failing), "",
                          Threshold(0, "==", f"{n} cases of the {plan.budget} plan (seed {plan.base_seed})"),
                          key="verify.numerics.failing_cases")]
        if stalled:
            figures.append(Figure("cases not judged (their JIT compile did not finish within the case limit)",
                                  len(stalled), "", Threshold(0, "==", "a kernel's first call at a shape must "
                                                                       "compile within --case-timeout"),
                                  key="verify.numerics.cases_not_judged_compile_stalled"))
        unjudged = [r for r in unjudged if r not in stalled]
        if unjudged:
            figures.append(Figure("cases not judged (out of memory not shown to be the implementation's)", len(unjudged),
                                  "", Threshold(0, "==", "opgate judges an out-of-memory error only when the demand "
                                                         "is the implementation's own"),
                                  key="verify.numerics.cases_not_judged_out_of_memory_not_shown_to_be_the_"
                                      "implementation_s"))
        figures += _side_by_side(worst, plan, n)
        figures += _aggregate_figures(records, plan.out_dtypes, op)
        figures += prepared.figures
        extra: dict[str, Any] = {
            "op": op.name, "implementation": choice.name, "backend": choice.backend, "origin": choice.origin,
            "dtype": plan.dtype, "device": prepared.device, "budget": plan.budget, "plan_seed": plan.base_seed,
            "calibration": plan.summary, "backend_facts": prepared.facts, "notes": prepared.notes,
            "poisoned_out": prepared.poisoned_out, "artefacts": artefacts,
            "worst_case": worst.case.label(), "cases": [r.compact() for r in records],
            "deviations": [d.to_dict() for d in deviations], "failure_class": failure_class,
        }
        undefined = sum(st.undefined for r in records for st in r.verdict.stats)
        if undefined:
            extra["undefined_elements"] = undefined
            figures.append(Figure("elements not judged (truth undefined: 0/0 or an empty reduction at a size opgate "
                                  "added, or a NaN converted to an integer)", undefined,
                                  "elements", key="verify.numerics.elements_not_judged_truth_undefined_0_0_or_an_"
                                                  "empty_reduction_at_a_size_opgate_added_or_a_nan_converted_to_an_"
                                                  "integer"))
        dropped = sum(st.nan_dropped for r in records for st in r.verdict.stats)
        if dropped:
            figures.append(Figure("NaN dropped (allowed: nan_policy='ignore')", dropped, "elements",
                                  key="verify.numerics.nan_dropped_allowed_nan_policy_ignore"))
        if failing:
            extra["failing_case_stats"] = [
                {"case": r.case.label(), "reasons": list(r.verdict.reasons),
                 "outputs": [s.to_dict() for s in r.verdict.stats]}
                for r in failing[:MAX_CASE_RECORDS_WITH_STATS]
            ]
        if unjudged:
            extra["cases_not_judged"] = [{"case": r.case.label(), "why": r.verdict.not_judged} for r in unjudged]
        not_judged = (f"{len(unjudged)}/{n} case(s) not judged, first {unjudged[0].case.label()}: "
                      f"{unjudged[0].verdict.not_judged}") if unjudged else ""
        if stalled:
            extra["compile_stalled"] = [{"case": r.case.label(), "why": r.verdict.not_judged} for r in stalled]
        if not failing and not unjudged and stalled:
            first = stalled[0]
            judged_ok = n - len(stalled)
            return self.warned(
                f"[compile_time] {len(stalled)}/{n} case(s) not judged: {first.case.label()}: "
                f"{first.verdict.not_judged}; the other {judged_ok} case(s) are within budget"
                + (f" or documented deviations ({', '.join(sorted({d.kind for d in deviations}))})" if deviations
                   else ""),
                figures=figures, extra={**extra, "failure_class": "compile_time"},
                remediation="The kernel's JIT compile at this shape ran past --case-timeout: a first call at this "
                            "shape stalls as long in production (Triton's autotuner compiles every config). Find the "
                            "config with the most elements per thread (autotune key in the stderr tail), prune it "
                            "for such shapes, or raise --case-timeout to judge the case.")
        if not failing and unjudged:
            judged = (f"the other {n - len(unjudged)} case(s) are within budget" if not deviations else
                      f"the other {n - len(unjudged)} case(s) are within budget or documented deviations "
                      f"({', '.join(sorted({d.kind for d in deviations}))})")
            return self.result(Outcome.ERROR, f"could not judge: {not_judged}; {judged}", figures=figures, extra=extra,
                               remediation=NOT_JUDGED_REMEDIATION)
        if not failing:
            passing = [r for r in records if r.verdict.passed] or records
            ratio = max(r.verdict.worst_ratio for r in passing)
            worst_label = max(passing, key=lambda r: r.verdict.worst_ratio).case.label()
            limited = [r for r in records if _limitations(r.verdict.reasons)]
            if limited:  # never green on nothing: say how many cases were judged at all
                judged = [r for r in records if r.verdict.passed and any(s.numel for s in r.verdict.stats)]
                kinds = ", ".join(sorted({d.kind for d in deviations}))
                head = (f"no case was judged here [{kinds}]" if not judged else
                        f"{len(judged)}/{n} cases judged and within budget on {prepared.device}; not judged [{kinds}]")
                return self.warned(
                    f"{head}: " + "; ".join(d.detail for d in deviations),
                    figures=figures, extra=extra,
                    remediation="run opgate verify where the backend can run these cases (a GPU host compiles the "
                                "Triton kernels) to judge them; see docs/verify-method.md (Documented deviations)")
            if deviations:
                kinds = ", ".join(sorted({d.kind for d in deviations}))
                return self.warned(
                    f"correct apart from documented deviation(s) [{kinds}]: " + "; ".join(d.detail for d in deviations),
                    figures=figures, extra=extra,
                    remediation="a deviation is a legitimate production choice or limit, reported so it is known; "
                                "see docs/verify-method.md (Documented deviations)")
            return self.passed(
                f"{n}/{n} cases within budget on {prepared.device}; worst at {ratio:.0%} of its budget "
                f"({worst_label})", figures=figures, extra=extra)
        if shrunk is not None:
            small: Case = shrunk["case"]
            verdict: CaseVerdict = shrunk["verdict"]
            why = verdict.reasons[0] if verdict.reasons else "fails"
            extra.update(smallest_failing=small.to_dict(), smallest_failing_label=small.label(),
                         smallest_failing_reasons=list(verdict.reasons), replay=shrunk["token"],
                         shrink={"attempts": shrunk["attempts"], "steps": shrunk["steps"], "from": shrunk["from"]},
                         smallest_failing_stats=[s.to_dict() for s in verdict.stats])
            figures.insert(1, Figure("smallest failing case", small.label(),
                                     key="verify.numerics.smallest_failing_case"))
            worst_element = next((s.worst for s in verdict.stats if s.worst is not None), None)
            where = f"; worst element {worst_element.describe()}" if worst_element else ""
            reason = (f"{len(failing)}/{n} cases fail; smallest failing case {small.label()}: {why}{where}; "
                      f"replay: opgate verify {Path(task.spec_file).name} --replay {shrunk['token']}")
        else:
            first = failing[0]
            token = ReplayToken(op.name, choice.name, plan.dtype, first.case, plan.budget, plan.base_seed).encode()
            extra["replay"] = token
            reason = (f"{len(failing)}/{n} cases fail; first: {first.case.label()}: {first.verdict.reasons[0]}; "
                      f"replay: opgate verify {Path(task.spec_file).name} --replay {token}")
        reason = (f"[{failure_class}] {precision.text()}; {reason}" if precision is not None
                  else f"[{failure_class}] {reason}")
        noted = next((r for r in failing if getattr(r, "backend_note", "")), None)
        if noted is not None:  # one config per autotune key (verify/backends/autotune_choice.py): say which one
            reason = (f"{reason}; {noted.case.label()} ran the autotuned config {noted.backend_note} "
                      f"(one per key; {autotune_choice.AUTOTUNE_ENV}=benchmark judges Triton's own pick)")
        if not_judged:
            reason = f"{reason}; {not_judged}"
        if stalled:
            reason = f"{reason}; {len(stalled)} case(s) not judged, first {stalled[0].case.label()}: " \
                     f"{stalled[0].verdict.not_judged}"
        if range_note:
            reason = f"{reason}; {range_note}"
        if deviations:
            reason += "; also documented deviation(s): " + "; ".join(d.detail for d in deviations)
        if choice.origin == "reference":
            # opgate's own extra of the reference failing judges the budget, not the user's implementations
            extra["calibration_warning"] = True
            return self.warned(
                f"calibration warning: the reference through {choice.backend} (added by opgate) exceeds the "
                f"calibrated budget: {reason}", figures=figures, extra=extra,
                remediation="not a failure of your implementations: the budget may be too tight for this backend, "
                            "or the backend deviates (e.g. computes in the low precision); the case is named so "
                            "it can be replayed")
        remediation = remediation_for(failing)
        if precision is not None:
            remediation = precision.remedy()
        elif failure_class == gradient_failure_class(op) != "":  # a derived <op>.grad: what to fix in the backward
            remediation = f"{gradient_remediation(' '.join(' '.join(r.verdict.reasons) for r in failing))}; {remediation}"
        return self.failed(reason, figures=figures, remediation=remediation, extra=extra)


def _side_by_side(worst: CaseRecord, plan: PlanFile, n: int) -> list[Figure]:
    """The worst case's figures next to its budget and the eager baseline of the same case."""
    figures: list[Figure] = []
    stats_list = worst.verdict.stats or ()
    for stats, budget in zip(stats_list, worst.verdict.budgets):
        prefix = "" if len(worst.verdict.budgets) == 1 else f"{stats.name} "
        key = f"verify.numerics.{slug(stats.name)}_" if prefix else "verify.numerics."  # the output leads the key
        if budget.is_override:
            figures.append(Figure(f"{prefix}elements beyond atol+rtol|truth|", stats.mismatches, "",
                                  Threshold(0, "==", budget.rmse_source), key=f"{key}elements_beyond_atol_rtol_truth"))
            figures.append(Figure(f"{prefix}max abs error", stats.max_abs, key=f"{key}max_abs_error"))
            continue
        if budget.exact_mismatches >= 0:
            figures.append(Figure(f"{prefix}differing elements (worst case)", stats.exact_mismatches, "",
                                  Threshold(budget.exact_mismatches, "<=", budget.rmse_source),
                                  key=f"{key}differing_elements_worst_case"))
            continue
        figures.append(Figure(f"{prefix}RMSE (worst case)", stats.rmse, "",
                              Threshold(_round(budget.rmse), "<=", budget.rmse_source), key=f"{key}rmse_worst_case"))
        figures.append(Figure(f"{prefix}baseline RMSE (same case, eager {plan.dtype})", budget.baseline_rmse,
                              key=f"{key}baseline_rmse_same_case_eager_{slug(plan.dtype)}"))
        figures.append(Figure(f"{prefix}p99.9 |error| (worst case)", stats.quantile_abs, "",
                              Threshold(_round(budget.quantile), "<=", budget.quantile_source),
                              key=f"{key}p99_9_error_worst_case"))
        figures.append(Figure(f"{prefix}baseline p99.9 |error| (same case)", budget.baseline_quantile,
                              key=f"{key}baseline_p99_9_error_same_case"))
    figures.append(Figure("worst case", worst.case.label(), key="verify.numerics.worst_case"))
    return figures


def _round(value: float) -> float:
    return float(f"{value:.4g}") if math.isfinite(value) else value


def _aggregate_figures(records: list[CaseRecord], out_dtypes: Sequence[str], op: Operator) -> list[Figure]:
    stats: list[OutputStats] = [s for r in records for s in r.verdict.stats if not s.problem]
    if not stats:
        return []
    figures = [
        Figure("NaN/Inf where truth is finite", sum(s.nonfinite_unexpected for s in stats), "elements",
               Threshold(0, "==", "always a failure"), key="verify.numerics.nan_inf_where_truth_is_finite"),
        Figure("max abs error (all cases)", max(s.max_abs for s in stats),
               key="verify.numerics.max_abs_error_all_cases"),
        Figure("max rel error (all cases)", max(s.max_rel for s in stats), "",
               None, key="verify.numerics.max_rel_error_all_cases"),
        Figure("min cosine similarity", min(s.cosine for s in stats), key="verify.numerics.min_cosine_similarity"),
        Figure("mismatching elements (all cases)", sum(s.mismatches for s in stats), "elements",
               key="verify.numerics.mismatching_elements_all_cases"),
        Figure("max mismatch share (one case)", max(s.mismatch_share for s in stats),
               key="verify.numerics.max_mismatch_share_one_case"),
    ]
    if any(dt.is_float(d) for d in out_dtypes):
        figures.append(Figure("max ULP distance", max(s.ulp_max for s in stats), "ulp",
                              key="verify.numerics.max_ulp_distance"))
    unwritten = sum(s.unwritten for s in stats)
    if unwritten:
        figures.append(Figure("unwritten out= elements", unwritten, "elements", Threshold(0, "==", "poisoned buffer"),
                              key="verify.numerics.unwritten_out_elements"))
    if op.quantized or any(d in dt.SQNR_DTYPES for d in out_dtypes):
        figures.append(Figure("min SQNR", min(s.sqnr_db for s in stats), "dB", key="verify.numerics.min_sqnr"))
        figures.append(Figure("max exact-mismatch share", max(s.exact_mismatches / s.numel if s.numel else 0.0
                                                              for s in stats),
                              key="verify.numerics.max_exact_mismatch_share"))
    excused = sum(s.nonfinite_excused for s in stats)
    if excused:
        figures.append(Figure("NaN/Inf excused (eager baseline also non-finite)", excused, "elements",
                              key="verify.numerics.nan_inf_excused_eager_baseline_also_non_finite"))
    return figures


def remediation_for(failing: list[CaseRecord]) -> str:
    """Name the likely bug class from which cases fail and how."""
    hints: list[str] = []
    reasons = " ".join(" ".join(r.verdict.reasons) for r in failing)
    regimes = {r.case.regime for r in failing}
    origins = {r.case.origin for r in failing}
    nonfinite = "NaN/Inf where the truth is finite" in reasons
    if all(r.case.layout != "contiguous" for r in failing):
        hints.append("only non-contiguous inputs fail: use the tensors' real strides (x.stride()) or call "
                     ".contiguous(); declare contiguous=True in the TensorSpec if that is the contract")
    elif "never written" in reasons:
        hints.append("part of the output is never written: the launch grid or the store mask does not cover "
                     "every element")
    elif nonfinite and regimes <= {"large", "huge"}:
        hints.append("NaN/Inf on large inputs only: subtract the row maximum before exp, keep sums of squares in "
                     "float32, or rescale before squaring")
    elif nonfinite:
        hints.append("NaN/Inf from finite inputs: look for masked lanes loaded with other=0 feeding a max/exp/"
                     "division, or reads past the end of a row; if the output comes from torch.empty, NaN also "
                     "marks elements never written (opgate fills torch.empty with NaN): check the store mask and grid")
    if "truth is NaN/Inf" in reasons:
        hints.append("NaN/Inf inputs are not propagated: a max/min or masking step drops them")
    if not hints and "declared" not in origins and origins <= {"edge", "random", "layout", "regime", "shrunk"}:
        hints.append("only opgate's edge sizes fail: check the tail mask (offsets < n) and that reductions "
                     "divide by the true length, not the padded block")
    if not hints and ("RMSE" in reasons or "p99.9" in reasons):
        hints.append("error above the calibrated budget: accumulate in float32 and round once at the end")
    if not hints and "raised" in reasons:
        hints.append("the implementation raises on some shapes: support them or list the dim in exact_dims")
    hints.append(f"budgets: {K_RMSE:g}x/{K_QUANTILE:g}x the eager baseline (docs/verify-method.md)")
    return "; ".join(hints)
