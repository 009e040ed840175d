"""A library run's numerics queue replayed offline in three orders, from its report alone, and in a fourth where an
earlier run's report is given: longest first by the seconds each check took in that run (verify/check_seconds.py,
what opgate does where it has an earlier run's seconds; a check that run lacks gets the median of those it has).

    python3 benchmarks/numerics_queue_replay.py REPORT.json [--history EARLIER_REPORT.json]

The runner takes ready numerics checks first come, first served (their plans' order). The replay gives the numerics
checks as many slots at each time as the run gave them (as many as ran at once until its last numerics check began,
then the most that ran at once); whenever one is free it starts the ready check (its plan written:
extra.engine.calibration_spans_s) that an order puts first, for the seconds it took in the run (extra.timeline). It
prints when the last would end: in the run's order (the replay's own error against the run shows beside it), last
written first, and longest first knowing each check's seconds (the best an order can do; no predictor made before a
check runs gives them). The slots do not move with the order, so it compares orders, not runs.
"""

from __future__ import annotations

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
    """When the last check ends if, whenever the run had a slot for a numerics check, the ready one (its plan
    written) that `first` ranks first starts (queue_replay_cli.replay_on_slots)."""
    from queue_replay_cli import replay_on_slots

    return replay_on_slots(checks, first, lambda check, _ended: check["ready"], [c["ready"] for c in checks])


def main(argv: list[str]) -> int:
    from queue_replay_cli import main as replay_main, reader

    def heading(checks: list[NumericsCheck]) -> str:
        ran = max(check["start"] + check["seconds"] for check in checks)
        return f"{len(checks)} numerics checks; the run's last ended at {ran:.1f} s"

    def orders(_checks: list[NumericsCheck]) -> list[tuple[str, Callable[[NumericsCheck], float]]]:
        return [("first come, first served (the runner's)", lambda c: c["ready"]),
                ("last written first", lambda c: -c["ready"]),
                ("longest first, knowing each check's seconds", lambda c: -c["seconds"])]
    read = reader(numerics_checks, "no numerics check with a timeline and a plan time; give a GPU library run's report "
                  "(opgate verify --json)")
    return replay_main(argv, "numerics_queue_replay.py", read, heading, orders, replay)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
