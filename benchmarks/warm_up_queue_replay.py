"""A library run's runtime warm-ups replayed offline in their run's order and longest first, from its report alone,
and longest first by an earlier run's seconds where that run's report is given (verify/check_seconds.py: what opgate
does where it has an earlier run's seconds; a warm-up that run lacks gets the median of those it has).

    python3 benchmarks/warm_up_queue_replay.py REPORT.json [--history EARLIER_REPORT.json]

The warm-ups (a call at the timing size that compiles and autotunes, before each exclusive runtime check) are all
queued when the run starts and the runtime checks wait for the last of them. Each warm-up start of the run is taken as
a slot given at that time; at each, the replay starts the first warm-up in the order whose forward's warm-up has
ended (a gradient twin's warm-up waits for its operator's: verify/builtin_stages.RuntimeStage), for the seconds it
took in the run (extra.timeline). It prints when the last would end. The slots' times do not move with the order, so
it compares orders, not runs.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

WARM_UP_SUFFIX = "_warm_up"  # verify/check_seconds.WARM_UP_SUFFIX
GRAD = ".grad."  # a gradient twin's operator is "<forward>.grad"

WarmUp = dict[str, Any]


def warm_ups(report: dict[str, Any]) -> list[WarmUp]:
    """Each runtime warm-up of the report that ended: its id, start and seconds, in the order they started."""
    timeline = (report.get("extra") or {}).get("timeline") or {}
    found = [{"id": check_id, "start": float(span[0]), "seconds": float(span[1]) - float(span[0])}
             for check_id, span in timeline.items()
             if check_id.endswith(WARM_UP_SUFFIX) and isinstance(span, list) and len(span) >= 2]
    return sorted(found, key=lambda w: w["start"])


def forward_of(check_id: str) -> str | None:
    """The warm-up a gradient twin's warm-up starts after, None for an operator's own."""
    return check_id.replace(GRAD, ".", 1) if GRAD in check_id else None


def replay(runs: list[WarmUp], first: Callable[[WarmUp], float]) -> float:
    """When the last warm-up ends if each slot the run gave goes to the first warm-up in `first`'s order whose
    forward's warm-up has ended by then (else the first in that order, started once its forward's ends)."""
    ids = {w["id"] for w in runs}
    waiting = sorted(runs, key=first)
    ended: dict[str, float] = {}
    for grant in sorted(w["start"] for w in runs):
        def free(w: WarmUp) -> bool:
            forward = forward_of(w["id"])
            return forward is None or forward not in ids or ended.get(forward, float("inf")) <= grant

        chosen = next((w for w in waiting if free(w)), waiting[0])
        waiting.remove(chosen)
        forward = forward_of(chosen["id"])
        begins = max(grant, ended.get(forward, 0.0) if forward in ids else 0.0)
        ended[chosen["id"]] = begins + chosen["seconds"]
    return max(ended.values())


def main(argv: list[str]) -> int:
    from queue_replay_cli import main as replay_main, reader

    def heading(runs: list[WarmUp]) -> str:
        ran = max(w["start"] + w["seconds"] for w in runs)
        return f"{len(runs)} runtime warm-ups; the run's last ended at {ran:.1f} s"

    orders = [("in the run's order", lambda w: w["start"]),
              ("longest first, knowing each warm-up's seconds", lambda w: -w["seconds"])]
    read = reader(warm_ups, "no runtime warm-up with a start and an end in its timeline; give a GPU library run's "
                  "report (opgate verify --json) with the runtime stage")
    return replay_main(argv, "warm_up_queue_replay.py", read, heading, orders, replay)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
