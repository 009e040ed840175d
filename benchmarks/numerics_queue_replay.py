"""A library run's numerics queue replayed offline in three orders, from its report alone, and in a fourth where an
earlier run's report is given: longest first by the seconds each check took in that run (verify/check_seconds.py,
what opgate does where it has an earlier run's seconds; a check that run lacks gets the median of those it has).

    python3 benchmarks/numerics_queue_replay.py REPORT.json [--history EARLIER_REPORT.json]

The runner takes ready numerics checks first come, first served (their plans' order). Each numerics start of the
run is taken as a slot given at that time; at each, the replay starts the ready check (its plan written:
extra.engine.calibration_spans_s) that an order puts first, for the seconds it took in the run (extra.timeline). It
prints when the last would end: in the run's order (the replay's own error against the run shows beside it), last
written first, and longest first knowing each check's seconds (the best an order can do; no predictor made before a
check runs gives them). The slots' times do not move with the order, so it compares orders, not runs.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "gpu"))
from library_summary import plan_written  # noqa: E402 - the summary's reading of a check's plan time

NumericsCheck = dict[str, Any]


def numerics_checks(report: dict[str, Any]) -> list[NumericsCheck]:
    """Each numerics check of the report that ran: its id, when its plan was written, its start and seconds."""
    extra = report.get("extra") or {}
    timeline, spans = extra.get("timeline") or {}, (extra.get("engine") or {}).get("calibration_spans_s") or {}
    checks = []
    for result in report.get("results", []):
        facts = result.get("extra") or {}
        times = timeline.get(result["check_id"]) or []
        ready = plan_written(result["check_id"], spans)
        if "phase_s" in facts and "cases" in facts and len(times) >= 2 and ready is not None:
            checks.append({"id": result["check_id"], "ready": ready, "start": float(times[0]),
                           "seconds": float(times[1]) - float(times[0])})
    return checks


def replay(checks: list[NumericsCheck], first: Callable[[NumericsCheck], float]) -> float:
    """When the last check ends if each slot the run gave goes to the ready check that `first` ranks lowest."""
    grants = sorted(check["start"] for check in checks)
    arriving = sorted(checks, key=lambda check: check["ready"])
    ready: list[NumericsCheck] = []
    end, k = 0.0, 0
    for grant in grants:
        while k < len(arriving) and arriving[k]["ready"] <= grant:
            ready.append(arriving[k])
            k += 1
        if not ready:  # a slot before any plan is ready: the next plan's check takes it when written
            ready.append(arriving[k])
            k += 1
        chosen = min(ready, key=first)
        ready.remove(chosen)
        end = max(end, max(grant, chosen["ready"]) + chosen["seconds"])
    return end


USAGE = "python3 benchmarks/numerics_queue_replay.py REPORT.json [--history EARLIER_REPORT.json]"


def _checks_of(path: Path) -> list[NumericsCheck] | str:
    """The report's numerics checks, or the one line that says why there are none."""
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return f"{path}: not a readable JSON report ({exc.__class__.__name__})"
    checks = numerics_checks(report) if isinstance(report, dict) else []
    return checks or (f"{path}: no numerics check with a timeline and a plan time; give a GPU library run's report "
                      "(opgate verify --json)")


def by_history(history: list[NumericsCheck]) -> Callable[[NumericsCheck], float]:
    """Longest first by the seconds each check took in an earlier run; a check it lacks gets their median."""
    seconds = {check["id"]: check["seconds"] for check in history}
    prior = statistics.median(seconds.values())
    return lambda check: -seconds.get(check["id"], prior)


def main(argv: list[str]) -> int:
    history_path = None
    if len(argv) == 3 and argv[1] == "--history":
        history_path = Path(argv[2])
    elif len(argv) != 1:
        print(f"numerics_queue_replay.py: give one report, and optionally --history EARLIER_REPORT.json: {USAGE}",
              file=sys.stderr)
        return 2
    checks = _checks_of(Path(argv[0]))
    history = _checks_of(history_path) if history_path is not None else []
    for found in (checks, history):
        if isinstance(found, str):
            print(f"numerics_queue_replay.py: {found}", file=sys.stderr)
            return 2
    assert isinstance(checks, list) and isinstance(history, list)
    ran = max(check["start"] + check["seconds"] for check in checks)
    print(f"{len(checks)} numerics checks; the run's last ended at {ran:.1f} s")
    orders = [("first come, first served (the runner's)", lambda c: c["ready"]),
              ("last written first", lambda c: -c["ready"]),
              ("longest first, knowing each check's seconds", lambda c: -c["seconds"])]
    if history:
        known = len({c["id"] for c in checks} & {c["id"] for c in history})
        orders.append((f"longest first by the earlier run's ({known} of {len(checks)} known)", by_history(history)))
    for name, first in orders:
        print(f"  {name:<52} {replay(checks, first):7.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
