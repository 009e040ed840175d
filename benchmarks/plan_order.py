"""The calibration pool's plan order: by input elements (the old estimate) against one timed reference call.

    PYTHONPATH=src python benchmarks/plan_order.py --report RUN.json [--processes 8] SPEC.py ...
        [--apart flaggems_ --isolated 3,4,5]

For each spec file the empty-case probe's child runs as in a GPU library run, with and without its timed calls
(verify/plan_order.py), and prints what it cost. Then the plans of those files that RUN.json's calibration ran
(extra.engine.calibration_spans_s: each plan's measured seconds) are replayed in a pool of --processes, every plan
ready at once, a free process taking the costliest plan by each order: by elements (plan_order.plan_cost), by the
timed calls (plan_order.estimated_seconds), and by the measured seconds themselves (the best a ranking can do). The
replay's end is when the last plan would have been written; the busy host's waits, and plans that became ready
late, are not in it, so it compares orders, not runs. No verdict changes.

With --apart PREFIX, every plan of the report is replayed once more in the measured order, those of spec files whose
name starts with PREFIX (specs that replace aten's GPU kernels: FlagGems) on a side of --isolated processes of their
own beside --processes for the rest, each taking a free process of the other side once nothing else is left to
start (calibrator.CalibrationPool): what the split costs at best, for each count.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable


def _replay(seconds: dict[str, float], rank: Callable[[str], float], processes: int) -> float:
    """When the last plan ends with `processes` taking the plans in descending `rank` (of the plan's operator)."""
    from opgate.verify.plan_order import predicted_ends

    return max(predicted_ends(seconds, processes, rank=lambda plan: rank(plan.split()[0])).values())


def _replay_sides(seconds: dict[str, float], apart: set[str], processes: int, isolated: int) -> tuple[float, float]:
    """(when the last plan of the others ends, when the last apart plan ends), longest first on each side; an apart
    plan takes a free process of the others once none of theirs is left to start."""
    others = sorted((p for p in seconds if p not in apart), key=lambda p: -seconds[p])
    kept = sorted((p for p in seconds if p in apart), key=lambda p: -seconds[p])
    running: list[tuple[float, bool]] = []  # (end, on the isolated side)
    now, ends = 0.0, {True: 0.0, False: 0.0}
    while others or kept or running:
        busy = {True: sum(1 for _, side in running if side), False: sum(1 for _, side in running if not side)}
        while kept and busy[True] < isolated:
            plan = kept.pop(0)
            running.append((now + seconds[plan], True))
            ends[True] = max(ends[True], now + seconds[plan])
            busy[True] += 1
        while (others or kept) and busy[False] < processes:
            plan = others.pop(0) if others else kept.pop(0)
            running.append((now + seconds[plan], False))
            ends[plan in apart] = max(ends[plan in apart], now + seconds[plan])
            busy[False] += 1
        running.sort()
        now = running.pop(0)[0]
    return ends[False], ends[True]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="+", type=Path)
    parser.add_argument("--report", type=Path, required=True, help="an opgate verify --json report of those specs")
    parser.add_argument("--processes", type=int, default=8, help="the pool's processes (8 on a 16-core host)")
    parser.add_argument("--apart", default="", help="spec files whose name starts so calibrate apart (flaggems_)")
    parser.add_argument("--isolated", default="3", help="process counts of the apart side to replay, e.g. 3,4,5")
    args = parser.parse_args(argv)
    try:
        spans = json.loads(args.report.read_text())["extra"]["engine"]["calibration_spans_s"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"plan_order.py: --report {args.report}: no calibration spans to replay ({exc}); pass the --json "
              "report of a GPU library run", file=sys.stderr)
        return 2
    counts = [int(c) for c in args.isolated.split(",") if c.strip().isdigit()]
    if args.processes < 1 or any(not spec.is_file() for spec in args.specs) or not counts or min(counts) < 1:
        print("plan_order.py: give existing spec files, --processes of at least 1 and --isolated counts of at least 1 "
              "(e.g. 3,4,5)", file=sys.stderr)
        return 2

    from opgate.core.spec import load_spec_file
    from opgate.verify import calibrator, plan_order
    from opgate.verify.gradients import with_gradient_operators
    from opgate.verify.inputs import plan_cases

    elements: dict[str, float] = {}
    timed: dict[str, float] = {}
    print(f"{'spec file':<28} {'probe s':>8} {'probe s, timed':>15} {'calls timed':>12} {'their CPU s':>12}")
    for spec in args.specs:
        jobs = [SimpleNamespace(op=op, dtypes=["float32"], cases=plan_cases(op, "standard", 0))
                for op in with_gradient_operators(load_spec_file(str(spec)))]
        began = time.perf_counter()
        calibrator._probe_file(spec, jobs, timed=False)
        plain_s = time.perf_counter() - began
        began = time.perf_counter()
        _, calls = calibrator._probe_file(spec, jobs, timed=True)
        timed_s = time.perf_counter() - began
        print(f"{spec.name:<28} {plain_s:8.1f} {timed_s:15.1f} {len(calls):5d} of {len(jobs):<4d} "
              f"{sum(calls.values()):12.3f}")
        for job in jobs:
            elements[job.op.name] = plan_order.plan_cost(job.op, job.cases)
            timed[job.op.name] = plan_order.estimated_seconds(job.op, job.cases, calls.get(job.op.name))
    seconds = {plan: span[1] - span[0] for plan, span in spans.items() if plan.split()[0] in elements}
    if not seconds:
        print(f"plan_order.py: --report {args.report} calibrated none of these specs' operators", file=sys.stderr)
        return 2
    measured: dict[str, float] = {}
    for plan, value in seconds.items():
        measured[plan.split()[0]] = max(measured.get(plan.split()[0], 0.0), value)
    print(f"\n{len(seconds)} plans, {sum(seconds.values()):.0f} s measured, the longest {max(seconds.values()):.0f} s; "
          f"{args.processes} processes can end no sooner than {sum(seconds.values()) / args.processes:.0f} s")
    print(f"{'order':<34} {'last plan written':>18}  first five")
    for name, rank in (("by elements (the old estimate)", elements.__getitem__),
                       ("by one timed call (the default)", timed.__getitem__),
                       ("by the measured seconds", measured.__getitem__)):
        first = sorted(measured, key=lambda op: -rank(op))[:5]
        print(f"{name:<34} {_replay(seconds, rank, args.processes):16.0f} s  {', '.join(first)}")
    if args.apart:
        _print_sides(json.loads(args.report.read_text()), spans, args.apart, args.processes, counts)
    return 0


def _print_sides(report: dict, spans: dict, prefix: str, processes: int, counts: list[int]) -> None:
    """Every plan of the report, the apart side's at each process count (--apart)."""
    spec_of = {}
    for result in report.get("results", []):
        extra = result.get("extra") or {}
        if extra.get("op") and extra.get("spec_file"):
            spec_of[str(extra["op"])] = Path(str(extra["spec_file"])).name
    seconds = {plan: span[1] - span[0] for plan, span in spans.items()}
    apart = {plan for plan in seconds if spec_of.get(plan.split()[0], "").startswith(prefix)}
    print(f"\nall {len(seconds)} plans of the report, {len(apart)} of them apart ({prefix}*: "
          f"{sum(seconds[p] for p in apart):.0f} s of {sum(seconds.values()):.0f} s), longest first on each side")
    print(f"{'processes':<22} {'the others end':>15} {'the apart end':>14}")
    for isolated in counts:
        others_end, apart_end = _replay_sides(seconds, apart, processes, isolated)
        print(f"{processes} + {isolated} apart{'':<12} {others_end:13.0f} s {apart_end:12.0f} s")


if __name__ == "__main__":
    sys.exit(main())
