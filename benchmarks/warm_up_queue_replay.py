"""A library run's runtime warm-ups replayed offline in their run's order, longest first and longest chain first,
from its report alone, and in both orders by an earlier run's seconds where that run's report is given
(verify/check_seconds.py: opgate queues them longest chain first where it has an earlier run's seconds; a warm-up that
run lacks gets the median of those it has).

    python3 benchmarks/warm_up_queue_replay.py REPORT.json [--history EARLIER_REPORT.json]

The warm-ups (a call at the timing size that compiles and autotunes, before each exclusive runtime check) are all
queued when the run starts and the runtime checks wait for the last of them. A gradient twin's warm-up starts after
its operator's own (verify/builtin_stages.RuntimeStage), so a chain weighs the two together. The replay gives the
warm-ups as many slots at each time as the run gave them (as many as ran at once, 2 of 16 while the numerics backlog
lasted; after the run's last warm-up began, the most that ran at once); whenever one is free it starts the first
warm-up in the order whose forward's warm-up has ended, for the seconds it took in the run (extra.timeline), and it
prints when the last would end. The slots do not move with the order, so it compares orders, not runs.
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


def by_chain(history: list[WarmUp]) -> Callable[[WarmUp], float]:
    """Longest first by `history`'s seconds, each warm-up weighed with its gradient twin's (opgate's order:
    verify/check_seconds.chained_seconds); one it lacks gets their median."""
    import statistics

    seconds = {w["id"]: w["seconds"] for w in history}
    prior = statistics.median(seconds.values())
    gradient = {forward_of(i): i for i in seconds if forward_of(i)}
    return lambda w: -(seconds.get(w["id"], prior) + (seconds[gradient[w["id"]]] if w["id"] in gradient else 0.0))


def replay(runs: list[WarmUp], first: Callable[[WarmUp], float]) -> float:
    """When the last warm-up ends if, whenever the run had a slot for a warm-up, the first in `first`'s order whose
    forward's warm-up has ended starts, for the seconds it took in the run (queue_replay_cli.replay_on_slots)."""
    from queue_replay_cli import replay_on_slots

    ids = {w["id"] for w in runs}

    def ready_at(w: WarmUp, ended: dict[str, float]) -> float:
        forward = forward_of(w["id"])
        return ended.get(forward, float("inf")) if forward in ids else float("-inf")

    return replay_on_slots(runs, first, ready_at)


def main(argv: list[str]) -> int:
    from queue_replay_cli import BY_HISTORY, main as replay_main, reader

    def heading(runs: list[WarmUp]) -> str:
        ran = max(w["start"] + w["seconds"] for w in runs)
        return f"{len(runs)} runtime warm-ups; the run's last ended at {ran:.1f} s"

    def orders(runs: list[WarmUp]) -> list[tuple[str, Callable[[WarmUp], float]]]:
        return [("in the run's order", lambda w: w["start"]),
                ("longest first, knowing each warm-up's seconds", lambda w: -w["seconds"]),
                ("longest chain first, knowing each warm-up's", by_chain(runs))]

    read = reader(warm_ups, "no runtime warm-up with a start and an end in its timeline; give a GPU library run's "
                  "report (opgate verify --json) with the runtime stage")
    return replay_main(argv, "warm_up_queue_replay.py", read, heading, orders, replay,
                       history_orders=(*BY_HISTORY, ("longest chain first by the earlier run's", by_chain)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
