"""What a library run's report says about where its time went: results by stage and outcome, plans calibrated by
each 100 s, warm-worker starts, the heaviest bound terms, the numerics checks' Triton compiles (count and seconds,
from each result's backend_facts.triton_jit) and the operators that compiled longest; what the side-by-side work
ended on (the last plan, the last numerics checks, when their plans were written and the compile-ahead tasks they
waited for, the numerics checks' wait from plan to start, the last runtime warm-ups); the longest plans and when
each spec file's first plan began; the processes busy each 50 s, by what they did; the runtime checks timed twice
and the warm workers' give-backs of GPU memory beside them (the memory log beside the report); the host's speed
where scripts/host_speed.py left it beside the report.

    python3 scripts/gpu/library_summary.py REPORT.json
"""

from __future__ import annotations

import collections
import json
import statistics
import sys
from pathlib import Path
from typing import Callable


def _terms_per_case(per_plan: dict) -> list[str]:
    """A case's bound terms on each device (verify/bounds_device.py puts the large ones on the GPU): the GPU's cases
    are the larger, so the CPU's figure is no like-for-like comparison; the forty-third session's H100 run took
    288-623 ms a case on the GPU beside the run's other work for four fla plans whose same cases took 35-112 ms on
    an idle CPU thread."""
    gpu_cases = sum(int(c.get("on_gpu", 0)) for c in per_plan.values())
    cpu_cases = sum(int(c.get("computed", 0)) for c in per_plan.values()) - gpu_cases
    gpu_ms = sum(float(c.get("terms_ms_on_gpu", 0)) for c in per_plan.values())
    cpu_ms = sum(float(c.get("terms_ms_on_cpu", 0)) for c in per_plan.values())
    if not gpu_cases and not cpu_cases:
        return []
    per_case = sorted(float(c["terms_ms_on_gpu"]) / int(c["on_gpu"]) for c in per_plan.values() if c.get("on_gpu"))
    median = f", plans' median {per_case[len(per_case) // 2]:.0f} ms a case" if per_case else ""
    return [f"bound terms a case: GPU {gpu_ms / max(gpu_cases, 1):.0f} ms over {gpu_cases} cases{median}; "
            f"CPU {cpu_ms / max(cpu_cases, 1):.0f} ms over {cpu_cases} cases"]


def summary(report: dict, host_speed: dict | None = None, give_backs: list[dict] | None = None) -> list[str]:
    engine = report.get("extra", {}).get("engine", {})
    lines = [f"report {report.get('duration_s', 0):.0f} s, interrupted {report.get('interrupted')}, "
             f"exit {report.get('exit_code')}, {report.get('counts')}"]
    if host_speed:  # scripts/host_speed.py, beside the report: compare runs of different hosts with it
        lines.append(f"host speed: one compile {host_speed.get('compile_s')} s, {host_speed.get('parallel')} at once "
                     f"{host_speed.get('compile_parallel_s')} s, sha256 of 256 MiB {host_speed.get('sha256_s')} s "
                     f"(Triton {host_speed.get('triton')})")
    extra_ = report.get("extra", {})
    if extra_.get("time_limit_s"):
        lines.append(f"stopped by --time-limit {extra_['time_limit_s']:g} s")
    reused = collections.Counter(r.get("stage") or "-" for r in report.get("results", [])
                                 if (r.get("extra") or {}).get("cached_from"))
    if reused:  # from the verdict cache: whole files, or the finished checks of files judged in part
        lines.append(f"reused {sum(reused.values())} results: {dict(reused)}; settled operators "
                     f"{len(extra_.get('settled_operators') or [])}")
    outcomes = collections.Counter((r.get("stage") or "-", r["outcome"]) for r in report.get("results", []))
    lines += [f"  {stage} {outcome}: {count}" for (stage, outcome), count in sorted(outcomes.items())]
    workers = engine.get("warm_workers", {})
    lines.append(f"warm workers: {workers.get('started')} started, {workers.get('events')}")
    if engine.get("compile_ahead"):  # verify/compile_ahead.py (OPGATE_COMPILE_AHEAD=1)
        lines.append(f"compile ahead: {engine['compile_ahead']}")
    if engine.get("compile_ahead_queue"):  # when the calibrator fed the tasks, and the first of them
        lines.append(f"compile-ahead queue: {engine['compile_ahead_queue']}")
    if engine.get("numerics_order"):  # by plan written, or by an earlier run's seconds (verify/check_seconds.py)
        lines.append(f"numerics order: {engine['numerics_order']}")
    if engine.get("warm_up_order"):  # the runtime warm-ups': as planned, or by an earlier run's seconds
        lines.append(f"warm-up order: {engine['warm_up_order']}")
    if extra_.get("time_limit_met_while_closing_s"):  # verify/engine._finished_before_the_limit: a complete report
        lines.append(f"--time-limit {extra_['time_limit_met_while_closing_s']:g} s came while the run closed its "
                     "workers, after every check had ended")
    if engine.get("warm_ups"):  # the runtime warm-ups' steps, compiles and autotuning (verify/runtime.py)
        lines.append(f"runtime warm-ups: {json.dumps(engine['warm_ups'])[:900]}")
    ends = sorted(span[1] for span in engine.get("calibration_spans_s", {}).values())
    lines.append("plans calibrated by " + ", ".join(f"{t} s: {sum(1 for e in ends if e <= t)}"
                                                     for t in range(100, 700, 100)))
    lines += _plan_order(report)
    phases = engine.get("calibration_phases_s", {})
    heaviest = sorted(((p.get("bounds", 0.0), plan) for plan, p in phases.items()), reverse=True)[:6]
    lines.append(f"bound terms: {sum(p.get('bounds', 0.0) for p in phases.values()):.0f} s over {len(phases)} plans; "
                 "heaviest " + ", ".join(f"{plan} {seconds:.0f} s" for seconds, plan in heaviest))
    per_plan = engine.get("calibration_bounds_cache", {})
    lines += [f"  {plan}: {seconds:.0f} s of bound terms, {per_plan.get(plan, {})}" for seconds, plan in heaviest]
    lines += _terms_per_case(per_plan)
    if engine.get("measurement_windows"):  # engine/gpu_windows.py
        lines.append(f"measurement windows: {engine['measurement_windows']}")
    lines.append(f"spec load {engine.get('spec_load_s')} s, prepare {engine.get('prepare_s')} s, "
                 f"bound cache {engine.get('bounds_cache')}")
    # the measuring stages run one at a time: their durations' sum is the time the GPU was held for them alone
    durations: dict[str, list[float]] = collections.defaultdict(list)
    for result in report.get("results", []):
        durations[result.get("stage") or "-"].append(float(result.get("duration_s") or 0.0))
    for stage, values in sorted(durations.items()):
        values.sort()
        lines.append(f"  {stage} durations: {len(values)} results, sum {sum(values):.0f} s, "
                     f"median {values[len(values) // 2]:.1f} s, max {values[-1]:.1f} s")
    lines += _compiles(report)
    lines += _runtime_account(report)
    lines += _recovery_account(report)
    lines += _timed_twice(report, give_backs or [])
    extra = report.get("extra", {})
    timeline = extra.get("timeline", {})
    stage_of = {r["check_id"]: r.get("stage") or "-" for r in report.get("results", [])}
    spans: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for check_id, times in timeline.items():
        for start, end in zip(times[::2], times[1::2]):
            spans[stage_of.get(check_id, "internal" if check_id.endswith("_warm_up") else "-")].append((start, end))
    for stage, pairs in sorted(spans.items()):
        lines.append(f"  {stage} ran from {min(p[0] for p in pairs):.0f} s to {max(p[1] for p in pairs):.0f} s: "
                     f"{len(pairs)} tasks, {sum(e - s for s, e in pairs):.0f} s of slot time")
    lines += _critical_path(timeline, stage_of, engine.get("calibration_spans_s", {}), engine.get("run_again") or {})
    lines += _ahead_before_plans(timeline, engine.get("calibration_spans_s", {}))
    lines += _ahead_stall(timeline)
    lines += _busy(report)
    completed = engine.get("files_completed_s", {})
    lines.append(f"files judged wholly: {len(completed)}, at " + ", ".join(
        f"{Path(f).name} {t:.0f} s" for f, t in sorted(completed.items(), key=lambda item: item[1])))
    if "complete_files" in extra:
        lines.append(f"complete files at the interrupt: {len(extra['complete_files'])}: {extra['complete_files']}")
    if "verdict_cache" in extra:
        lines.append(f"verdict cache: {json.dumps(extra['verdict_cache'])[:600]}")
    return lines


# A call at least this slow is timed within the budget in fewer calls (gpu/probes/timing.py): the large losses, which
# made up most of a library run's serial end.
SLOW_CALL_US = 1e5


def _runtime_account(report: dict) -> list[str]:
    """The runtime checks this report ran (not reused) by phase: where the serial end of a run goes. Their first
    calls (compiles and autotuning left to the check by its warm-up), their timing, the graph checks, and the timing
    after the first call of the calls of 0.1 s or more."""
    checks = [r for r in report.get("results", []) if r.get("stage") == "runtime"
              and not (r.get("extra") or {}).get("cached_from") and (r.get("extra") or {}).get("timing")]
    if not checks:
        return []

    def phase(result: dict, name: str) -> float:
        return float((result["extra"].get("phase_s") or {}).get(name) or 0.0)

    def first_call(result: dict) -> float:
        return float(result["extra"]["timing"].get("first_call_s") or 0.0)

    slow = [r for r in checks if float(r["extra"]["timing"].get("median_us") or 0.0) >= SLOW_CALL_US]
    seconds = sum(float(r.get("duration_s") or 0) for r in checks)
    return [f"runtime checks run here: {len(checks)} in {seconds:.1f} s; first calls "
            f"{sum(first_call(r) for r in checks):.1f} s, timing {sum(phase(r, 'timing') for r in checks):.1f} s, "
            f"graph {sum(phase(r, 'graph') for r in checks):.1f} s; {len(slow)} calls of 0.1 s or more: "
            f"{sum(phase(r, 'timing') - first_call(r) for r in slow):.1f} s of timing after their first calls",
            _graph_not_timed(checks, phase)]


def _graph_not_timed(checks: list[dict], phase: Callable[[dict, str], float]) -> str:
    """How many graph checks left out the eager-vs-replay timing because the host submits the call in a small share
    of its GPU time (gpu/probes/graphs.py replay_timing_calls), against those that timed it, and their seconds."""
    captured = [r for r in checks if (r["extra"].get("graph") or {}).get("captured")]
    host_bound = [r for r in captured if (r["extra"].get("graph") or {}).get("replay_not_timed") == "host_bound"]
    timed = [r for r in captured if (r["extra"].get("graph") or {}).get("eager_us_per_call") is not None]
    parts: collections.Counter[str] = collections.Counter()
    for result in captured:  # gpu/probes/graphs.py GraphCaptureReport.seconds
        parts.update((result["extra"].get("graph") or {}).get("seconds") or {})
    return (f"graph checks: {len(host_bound)} not timed against replays as the host submits the call in under 5% of "
            f"its GPU time ({sum(phase(r, 'graph') for r in host_bound):.1f} s), {len(timed)} timed "
            f"({sum(phase(r, 'graph') for r in timed):.1f} s); their parts "
            + (", ".join(f"{k} {v:.1f} s" for k, v in parts.items()) or "not recorded"))


def _recovery_account(report: dict) -> list[str]:
    """The recovery checks this report ran (not reused) by phase, and their trials' fill, call with the GPU full
    and recovery: the last part of a run's serial end."""
    checks = [r for r in report.get("results", []) if r.get("stage") == "recovery"
              and not (r.get("extra") or {}).get("cached_from") and (r.get("extra") or {}).get("trials")]
    if not checks:
        return []
    phases: collections.Counter[str] = collections.Counter()
    trial_parts: collections.Counter[str] = collections.Counter()
    fill_by_index: collections.Counter[int] = collections.Counter()  # the first fill against the refills
    freed_all = 0
    for result in checks:
        phases.update(result["extra"].get("phase_s") or {})
        for index, trial in enumerate(result["extra"]["trials"]):
            trial_parts.update({k: float(trial.get(k) or 0.0) for k in ("fill_s", "full_call_s", "recover_s")})
            fill_by_index[index] += float(trial.get("fill_s") or 0.0)
            freed_all += bool(trial.get("freed_all"))
    seconds = sum(float(r.get("duration_s") or 0) for r in checks)
    return [f"recovery checks run here: {len(checks)} in {seconds:.1f} s; phases "
            + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()) + "; trials "
            + ", ".join(f"{k} {v:.1f} s" for k, v in trial_parts.items())
            + "; fill_s by trial " + ", ".join(f"{i}: {v:.1f} s" for i, v in sorted(fill_by_index.items()))
            + f"; retries that needed all freed: {freed_all}"]


def _timed_twice(report: dict, give_backs: list[dict]) -> list[str]:
    """The runtime checks timed twice because their first timing spread over 1.5x its fastest call (verify/runtime.py
    steady_timing), and which warm workers gave GPU memory back while each ran (the memory log beside the report,
    each entry's gave_back_epoch, against the timeline's zero in wall time): a worker gives memory back after it
    wrote its result, so a measurement can start beside it. The same count over every runtime check run here is
    the baseline to compare with."""
    results = [r for r in report.get("results", []) if r.get("stage") == "runtime"
               and not (r.get("extra") or {}).get("cached_from") and (r.get("extra") or {}).get("timing")]
    twice = [r for r in results if r["extra"].get("timing_not_kept")]
    if not twice:
        return []
    extra_ = report.get("extra", {})
    origin, timeline = extra_.get("timeline_origin_epoch"), extra_.get("timeline") or {}

    def beside(check_id: str) -> list[dict] | None:  # None: no span or no wall-time zero to place it
        span = timeline.get(check_id) or []
        if origin is None or len(span) < 2:
            return None
        start, end = origin + span[-2], origin + span[-1]
        return [g for g in give_backs if g["gave_back_epoch"][0] < end and g["gave_back_epoch"][1] > start]

    lines = [f"timed twice (the first timing spread over 1.5x its fastest call): {len(twice)} of {len(results)} "
             "runtime checks run here"]
    for result in twice:
        kept, other = result["extra"]["timing"], result["extra"]["timing_not_kept"]
        near = beside(result["check_id"])
        where = ("" if near is None else f"; {len(near)} give-backs of GPU memory beside it"
                 + (f" ({', '.join(sorted({str(g.get('check', '?')) for g in near}))})" if near else ""))
        lines.append(f"  {result['check_id']}: medians {kept.get('median_us', 0):.1f} us kept, "
                     f"{other.get('median_us', 0):.1f} us not{where}")
    placed = [near for near in (beside(r["check_id"]) for r in results) if near is not None]
    if placed and give_backs:
        lines.append(f"  baseline: {sum(1 for near in placed if near)} of {len(placed)} runtime checks had a "
                     "give-back beside them")
    return lines


def give_backs_beside(report_path: Path) -> list[dict]:
    """The give-backs (entries with gave_back_epoch) of the warm workers' memory log that scripts/gpu/library_ab.sh
    leaves beside a run's report (held.jsonl), if any."""
    entries: list[dict] = []
    try:
        lines = report_path.with_name("held.jsonl").read_text().splitlines()
    except OSError:
        return entries
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        span = entry.get("gave_back_epoch") if isinstance(entry, dict) else None
        if isinstance(span, list) and len(span) == 2:
            entries.append(entry)
    return entries


BUSY_STEP_S = 50
DTYPES = ("float64", "float32", "float16", "bfloat16")  # a numerics check's id ends with its dtype


def _until_the_stop(timeline: dict) -> dict:
    """The timeline with each unfinished task (a start and no end: an interrupted run's) running until the last
    event of the run, so that it counts as busy, as it was."""
    last = max((float(t) for times in timeline.values() for t in times), default=0.0)
    return {check: (list(times) + [last] if len(times) % 2 else times) for check, times in timeline.items()}


def _busy(report: dict) -> list[str]:
    """Processes busy each BUSY_STEP_S, by what they did: the check slots' tasks by stage (a shared sanitizer run once,
    from its first member's start to its last one's end), and the calibration processes (one per plan being
    calibrated). Where the sum stays above the host's cores, every task runs slower for it."""
    extra = report.get("extra", {})
    timeline = _until_the_stop(extra.get("timeline", {}))
    spans: list[tuple[str, float, float]] = []
    shared: dict[str, list[float]] = {}
    for result in report.get("results", []):
        times = timeline.get(result["check_id"], [])
        if len(times) < 2:
            continue
        run = ((result.get("extra") or {}).get("shared_run") or {}).get("log_path")
        if run:
            begun = shared.setdefault(run, [float(times[0]), float(times[-1])])
            begun[0], begun[1] = min(begun[0], float(times[0])), max(begun[1], float(times[-1]))
        else:
            spans.append((result.get("stage") or "-", float(times[0]), float(times[-1])))
    reported = {result["check_id"] for result in report.get("results", [])}
    spans += [("sanitizer", a, b) for a, b in shared.values()]
    spans += [("warm-up" if check_id.endswith("_warm_up") else "compile-ahead" if check_id.endswith("compile_ahead")
               else "numerics" if check_id.rsplit(".", 1)[-1] in DTYPES  # one still running at the stop
               else "other", float(times[0]), float(times[-1]))
              for check_id, times in timeline.items() if check_id not in reported and len(times) >= 2]
    spans += [("calibration", float(a), float(b))
              for a, b in extra.get("engine", {}).get("calibration_spans_s", {}).values()]
    if not spans:
        return []
    stages = sorted({stage for stage, _, _ in spans})
    end = max(b for _, _, b in spans)
    lines = [f"busy processes each {BUSY_STEP_S} s: " + " ".join(f"{stage:>13}" for stage in stages) + "  total"]
    for step in range(0, int(end) + 1, BUSY_STEP_S):
        share = {stage: sum(max(0.0, min(b, step + BUSY_STEP_S) - max(a, step)) for st, a, b in spans if st == stage)
                 / BUSY_STEP_S for stage in stages}
        lines.append(f"  {step:5d} s {' ' * 12}" + " ".join(f"{share[stage]:13.1f}" for stage in stages)
                     + f"  {sum(share.values()):5.1f}")
    return lines


def plan_written(check_id: str, calibration_spans: dict) -> float | None:
    """When the plan of numerics check `check_id` (verify.<operator>.<implementation>.<dtype>) was written."""
    parts = check_id.removeprefix("verify.").split(".")
    span = calibration_spans.get(f"{'.'.join(parts[:-2])} {parts[-1]}") if len(parts) >= 3 else None
    return float(span[1]) if span else None


def _critical_path(timeline: dict, stage_of: dict, calibration_spans: dict, run_again: dict) -> list[str]:
    """What the side-by-side work ended on: the last plan written, the last numerics checks (and whether a running
    compile-ahead task held one back: it ended as the check began), and the last runtime warm-ups before the first
    measurement."""
    ends: dict[str, tuple[float, float]] = {}
    for check_id, times in timeline.items():
        if len(times) >= 2:
            ends[check_id] = (float(times[0]), float(times[-1]))
    lines = []
    if calibration_spans:
        plan, (_, written) = max(calibration_spans.items(), key=lambda item: item[1][1])
        lines.append(f"last plan written at {written:.0f} s ({plan})")
    numerics = sorted((end, start, check) for check, (start, end) in ends.items() if stage_of.get(check) == "numerics")
    unfinished = sorted((float(times[0]), check) for check, times in timeline.items()
                        if len(times) == 1 and not check.endswith(("_warm_up", "compile_ahead")))
    if unfinished:  # an interrupted run's checks still running at the stop, or queued again after a first try
        lines.append(f"unfinished at the stop: {len(unfinished)} checks, the earliest begun: " + ", ".join(
            f"{check.removeprefix('verify.')} at {start:.0f} s" for start, check in unfinished[:4]))
    if run_again:  # tasks the follow-up ran again (verify/resume.NotedFollowUps): their first tries left no result
        why = collections.Counter(reason for reasons in run_again.values() for reason in reasons)
        waiting = [check.removeprefix("verify.") for _, check in unfinished if check in run_again]
        lines.append(f"run again: {len(run_again)} tasks, {dict(why)}"
                     + (f"; queued again and not ended at the stop: {', '.join(waiting[:4])}" if waiting else ""))
    for end, start, check in numerics[-3:]:
        ahead = ends.get(f"{check}.compile_ahead")
        held = (f"; its compile-ahead task ran {ahead[0]:.0f}-{ahead[1]:.0f} s" if ahead and ahead[1] >= start - 1.0
                else "")
        written = plan_written(check, calibration_spans)
        plan = f"; its plan written at {written:.0f} s" if written is not None else ""
        lines.append(f"  a last numerics check: {check} {start:.0f}-{end:.0f} s{plan}{held}")
    waits = sorted(start - written for _, start, check in numerics
                   if (written := plan_written(check, calibration_spans)) is not None)
    if waits:  # the numerics queue is first come, first served among ready checks: its backlog shows here
        lines.append(f"numerics checks' wait from their plan to their start: median {statistics.median(waits):.0f} s, "
                     f"longest {waits[-1]:.0f} s, {sum(1 for w in waits if w >= 30.0)} of {len(waits)} waited 30 s "
                     "or more")
    runtime = [start for check, (start, _) in ends.items() if stage_of.get(check) == "runtime"]
    warm_ups = sorted((end, start, check) for check, (start, end) in ends.items() if check.endswith("_warm_up"))
    if runtime and warm_ups:
        lines.append(f"first runtime check at {min(runtime):.0f} s; the last warm-ups: " + ", ".join(
            f"{check.removeprefix('verify.').removesuffix('.runtime_warm_up')} {start:.0f}-{end:.0f} s"
            for end, start, check in warm_ups[-3:]))
        if numerics:  # the measurements wait for every warm-up on their GPU: the wait once the numerics are done
            numerics_end = numerics[-1][0]
            after = [(end, start) for end, start, _ in warm_ups if end > numerics_end]
            if after:
                lines.append(f"the runtime checks began {min(runtime) - numerics_end:.0f} s after the last numerics "
                             f"check ({numerics_end:.0f} s): {len(after)} runtime warm-ups ended after it, "
                             f"{sum(1 for _, start in after if start >= numerics_end)} of them begun after it")
    return lines


def _ahead_stall(timeline: dict) -> list[str]:
    """The longest time in which no compile-ahead task started while one was still to start, and how many ran
    meanwhile: the queue keeps its head's place (CheckTask.ranked), so a head that gets no slot holds back the rest
    (fifty-third session's H200 run: none started from 81 s to 296 s, when the plans had been written)."""
    spans = sorted((float(t[0]), float(t[-1]) if len(t) >= 2 else float("inf"), check_id)
                   for check_id, t in timeline.items() if check_id.endswith(".compile_ahead") and t)
    if len(spans) < 2:
        return []
    gap, after = max(((later[0] - earlier[0], k) for k, (earlier, later) in enumerate(zip(spans, spans[1:]))))
    begun, next_start, head = spans[after][0], spans[after + 1][0], spans[after + 1][2]
    running = sum(1 for start, end, _ in spans if start <= begun and end > begun)
    return [f"compile-ahead starts: the longest wait {begun:.0f}-{next_start:.0f} s ({gap:.0f} s), {running} tasks "
            f"running at its start; the next to start: {head}"]


# The plans written last, whose compile-ahead tasks the calibrator queues first (verify/compile_ahead.py)
LATE_PLANS = 30


def _ahead_before_plans(timeline: dict, calibration_spans: dict) -> list[str]:
    """Whether the compile-ahead tasks ran before their plans were written (a task helps only then): of all, and of
    the LATE_PLANS plans written last, how many began and how many ended before their plan."""
    written = {plan: float(span[1]) for plan, span in calibration_spans.items()}
    if not written:
        return []
    late = set(sorted(written, key=written.get)[-LATE_PLANS:])
    counts = {"all": [0, 0, 0], "late": [0, 0, 0]}  # tasks, begun before the plan, ended before the plan
    for check_id, times in timeline.items():
        if not check_id.endswith(".compile_ahead") or not times:
            continue
        op_impl, _, dtype = check_id.removeprefix("verify.").removesuffix(".compile_ahead").rpartition(".")
        plan = f"{op_impl.rpartition('.')[0]} {dtype}"  # verify.<op>.<impl>.<dtype>.compile_ahead -> "<op> <dtype>"
        if plan not in written:
            continue
        start, end = float(times[0]), float(times[-1]) if len(times) >= 2 else float("inf")
        for group in ("all", "late") if plan in late else ("all",):
            counts[group][0] += 1
            counts[group][1] += start < written[plan]
            counts[group][2] += end < written[plan]
    (tasks, began, ended), (late_tasks, late_began, late_ended) = counts["all"], counts["late"]
    if not tasks:
        return []
    return [f"compile-ahead tasks before their plan was written: {began} of {tasks} began, {ended} ended; of the "
            f"{LATE_PLANS} plans written last, {late_began} of {late_tasks} began, {late_ended} ended"]


def _compiles(report: dict) -> list[str]:
    """The numerics checks' Triton JIT compiles against their wall time, and the operators that compiled longest."""
    seconds: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    slowest: list[tuple[float, str]] = []  # the longest single compile of each check (backend_facts.triton_jit)
    wall = 0.0
    for result in report.get("results", []):
        if result.get("stage") != "numerics":
            continue
        extra = result.get("extra") or {}
        jit = (extra.get("backend_facts") or {}).get("triton_jit") or {}
        seconds[str(extra.get("op"))] += float(jit.get("seconds") or 0.0)
        counts[str(extra.get("op"))] += int(jit.get("compiles") or 0)
        if jit.get("slowest"):
            slowest.append((float(jit["slowest"]["seconds"]), f"{jit['slowest']['kernel']} ({result['check_id']})"))
        wall += float(result.get("duration_s") or 0.0)
    if not counts:
        return []
    top = ", ".join(f"{op} {s:.0f} s ({counts[op]})" for op, s in seconds.most_common(8))
    lines = [f"numerics Triton compiles: {sum(counts.values())} in {sum(seconds.values()):.0f} s of the checks' "
             f"{wall:.0f} s; longest (seconds, compiles): {top}"]
    if slowest:
        slowest.sort(reverse=True)
        lines.append("longest single compiles: " + ", ".join(f"{s:.1f} s {what}" for s, what in slowest[:8]))
    return lines


def _plan_order(report: dict) -> list[str]:
    """The longest plans with their spans, and when each spec file's first plan began: the pool takes the costliest
    ready plan first by an estimate (plan_order.plan_cost), and a plan the estimate ranks low that is in fact the
    longest starts late and ends the calibration (fla_short_conv.grad, forty-fourth session)."""
    spans = report.get("extra", {}).get("engine", {}).get("calibration_spans_s", {})
    if not spans:
        return []
    longest = sorted(spans.items(), key=lambda item: item[1][0] - item[1][1])[:5]
    lines = ["longest plans: " + ", ".join(f"{name} {a:.0f}-{b:.0f} s" for name, (a, b) in longest)]
    estimates = report.get("extra", {}).get("engine", {}).get("plan_estimates_s", {})
    if estimates:  # what ranked them (verify/plan_order.py): the pool's first picks, and how many were not timed
        ranked = sorted(estimates.items(), key=lambda item: -float(item[1][0]))
        untimed = sum(1 for _, (_, source) in ranked if source != "call")
        lines.append("ranked first by the estimate: " + ", ".join(f"{op} {est:.3g}" for op, (est, _) in ranked[:6])
                     + f"; {untimed} of {len(ranked)} operators ranked by elements (call not timed)")
    file_of = {}
    for result in report.get("results", []):
        extra = result.get("extra") or {}
        if extra.get("op") and extra.get("spec_file"):
            file_of[str(extra["op"])] = Path(str(extra["spec_file"])).name
    first: dict[str, float] = {}
    for name, (began, _) in spans.items():
        spec = file_of.get(name.split()[0], "?")
        first[spec] = min(first.get(spec, began), began)
    lines.append("first plan began, by spec file: " + ", ".join(f"{spec} {at:.0f} s"
                                                                 for spec, at in sorted(first.items(),
                                                                                        key=lambda kv: kv[1])))
    return lines


def host_speed_beside(report_path: Path) -> dict | None:
    """The host_speed.json that scripts/gpu/library_env.sh leaves beside a run's report, if any."""
    path = report_path.with_name("host_speed.json")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python3 scripts/gpu/library_summary.py REPORT.json  (an opgate verify --json report)",
              file=sys.stderr)
        sys.exit(2)
    report_path = Path(sys.argv[1])
    try:
        loaded = json.loads(report_path.read_text())
    except (OSError, ValueError) as exc:
        print(f"library_summary.py: {report_path}: not a readable JSON report ({exc}); pass opgate verify's --json "
              "file", file=sys.stderr)
        sys.exit(2)
    print("\n".join(summary(loaded, host_speed_beside(report_path), give_backs_beside(report_path))))
