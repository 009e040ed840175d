"""What the queue replays share (numerics_queue_replay.py, warm_up_queue_replay.py): the replay on the slots a run
gave its tasks, and the command line: one report, and optionally --history EARLIER_REPORT.json; each order's
replayed end printed; bad input one line and exit 2."""

from __future__ import annotations

import heapq
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

Items = list[dict[str, Any]]
Order = Callable[[dict[str, Any]], float]


def slots(items: Items) -> tuple[Callable[[float], int], list[float]]:
    """The slots the run gave its tasks of the kind (each item's "start" and "seconds") at each time: as many as ran at
    once then, until the last of them began; after it, the most that ran at once (what was left had the free slots).
    Also the times that count changes."""
    spans = [(item["start"], item["start"] + item["seconds"]) for item in items]
    last_start = max(start for start, _ in spans)
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)

    def at(t: float) -> int:
        return most if t >= last_start else sum(1 for s, e in spans if s <= t < e)

    return at, sorted({t for span in spans for t in span})


def replay_on_slots(items: Items, first: Order, ready_at: Callable[[dict[str, Any], dict[str, float]], float],
                    arrivals: Sequence[float] = ()) -> float:
    """When the last item ends if, whenever the run had a slot for one (slots()), the first in `first`'s order that
    is ready starts, for the seconds it took in the run. `ready_at(item, ended)`: when it may start, given the ends so
    far (id -> end; inf while it waits for one); `arrivals`: the times items become ready that are no end. A replay
    that counts slots, not the run's start instants: given each start instant, a reordered run could hold more slots
    at once than the run had (the fifty-sixth session's replays did)."""
    at, changes = slots(items)
    events = sorted(set(changes) | set(arrivals))
    waiting = sorted(items, key=first)
    ended: dict[str, float] = {}
    running: list[tuple[float, str]] = []
    now = min(events)
    while waiting or running:
        while running and running[0][0] <= now:
            end, done = heapq.heappop(running)
            ended[done] = end
        while len(running) < at(now):
            ready = next((item for item in waiting if ready_at(item, ended) <= now), None)
            if ready is None:
                break
            waiting.remove(ready)
            heapq.heappush(running, (now + ready["seconds"], ready["id"]))
        upcoming = ([running[0][0]] if running else []) + [t for t in events if t > now][:1]
        if not upcoming:
            break
        now = min(upcoming)
    return max(ended.values())


def reader(items_of: Callable[[dict[str, Any]], Items], none_found: str) -> Callable[[Path], Items | str]:
    """A report's items (`items_of` the parsed report), or the one line that says why there are none (`none_found`
    after the path where it holds none)."""
    def read(path: Path) -> Items | str:
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            return f"{path}: not a readable JSON report ({exc.__class__.__name__})"
        items = items_of(report) if isinstance(report, dict) else []
        return items or f"{path}: {none_found}"

    return read


def by_history(history: Items) -> Order:
    """Longest first by the seconds each item took in an earlier run; one it lacks gets their median."""
    seconds = {item["id"]: item["seconds"] for item in history}
    prior = statistics.median(seconds.values())
    return lambda item: -seconds.get(item["id"], prior)


BY_HISTORY = (("longest first by the earlier run's", by_history),)


def main(argv: Sequence[str], script: str, read: Callable[[Path], Items | str], heading: Callable[[Items], str],
         orders: Callable[[Items], Sequence[tuple[str, Order]]], replay: Callable[[Items, Order], float],
         history_orders: Sequence[tuple[str, Callable[[Items], Order]]] = BY_HISTORY) -> int:
    """`read` gives a report's items (each with an "id") or the one line that says why there are none; `orders`
    (given the items) are replayed on them, and `history_orders` (longest first by its seconds) by an earlier run's
    seconds where --history names that run's report."""
    history_path = None
    if len(argv) == 3 and argv[1] == "--history":
        history_path = Path(argv[2])
    elif len(argv) != 1:
        print(f"{script}: give one report, and optionally --history EARLIER_REPORT.json: "
              f"python3 benchmarks/{script} REPORT.json [--history EARLIER_REPORT.json]", file=sys.stderr)
        return 2
    items = read(Path(argv[0]))
    history = read(history_path) if history_path is not None else []
    for found in (items, history):
        if isinstance(found, str):
            print(f"{script}: {found}", file=sys.stderr)
            return 2
    assert isinstance(items, list) and isinstance(history, list)
    print(heading(items))
    replayed = list(orders(items))
    if history:
        known = len({item["id"] for item in items} & {item["id"] for item in history})
        replayed += [(f"{name} ({known} of {len(items)} known)", order_by(history))
                     for name, order_by in history_orders]
    for name, first in replayed:
        print(f"  {name:<52} {replay(items, first):7.1f} s")
    return 0
