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
from pathlib import Path
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


def slots(runs: list[WarmUp]) -> tuple[Callable[[float], int], list[float]]:
    """The slots the run gave its warm-ups at each time: as many as ran at once then, until its last warm-up began
    (2 of 16 while a library's numerics backlog lasted); after it, the most that ran at once (what was left had the
    free slots). Also the times that count changes."""
    spans = [(w["start"], w["start"] + w["seconds"]) for w in runs]
    last_start = max(start for start, _ in spans)
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)

    def at(t: float) -> int:
        return most if t >= last_start else sum(1 for s, e in spans if s <= t < e)

    return at, sorted({t for span in spans for t in span})


def replay(runs: list[WarmUp], first: Callable[[WarmUp], float]) -> float:
    """When the last warm-up ends if, whenever the run had a slot for a warm-up (slots()), the first in `first`'s
    order whose forward's warm-up has ended starts, for the seconds it took in the run."""
    import heapq

    at, changes = slots(runs)
    ids = {w["id"] for w in runs}
    waiting = sorted(runs, key=first)
    ended: dict[str, float] = {}
    running: list[tuple[float, str]] = []
    now = min(w["start"] for w in runs)
    while waiting or running:
        while running and running[0][0] <= now:
            end, done = heapq.heappop(running)
            ended[done] = end
        while len(running) < at(now):
            ready = next((w for w in waiting if forward_of(w["id"]) not in ids
                          or ended.get(forward_of(w["id"]) or "", float("inf")) <= now), None)
            if ready is None:
                break
            waiting.remove(ready)
            heapq.heappush(running, (now + ready["seconds"], ready["id"]))
        upcoming = [running[0][0]] if running else []
        upcoming += [t for t in changes if t > now][:1]
        if not upcoming:
            break
        now = min(upcoming)
    return max(ended.values())


def main(argv: list[str]) -> int:
    from queue_replay_cli import BY_HISTORY, main as replay_main, reader

    def heading(runs: list[WarmUp]) -> str:
        ran = max(w["start"] + w["seconds"] for w in runs)
        return f"{len(runs)} runtime warm-ups; the run's last ended at {ran:.1f} s"

    def orders_knowing_each(runs: list[WarmUp]) -> list[tuple[str, Callable[[WarmUp], float]]]:
        return [("in the run's order", lambda w: w["start"]),
                ("longest first, knowing each warm-up's seconds", lambda w: -w["seconds"]),
                ("longest chain first, knowing each warm-up's", by_chain(runs))]

    read = reader(warm_ups, "no runtime warm-up with a start and an end in its timeline; give a GPU library run's "
                  "report (opgate verify --json) with the runtime stage")
    runs = read(Path(argv[0])) if len(argv) in (1, 3) else []
    orders = orders_knowing_each(runs) if isinstance(runs, list) and runs else []
    return replay_main(argv, "warm_up_queue_replay.py", read, heading, orders, replay,
                       history_orders=(*BY_HISTORY, ("longest chain first by the earlier run's", by_chain)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
