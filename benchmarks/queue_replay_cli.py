"""The command line the queue replays share (numerics_queue_replay.py, warm_up_queue_replay.py): one report, and
optionally --history EARLIER_REPORT.json; each order's replayed end printed; bad input one line and exit 2."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

Items = list[dict[str, Any]]
Order = Callable[[dict[str, Any]], float]


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
         orders: Sequence[tuple[str, Order]], replay: Callable[[Items, Order], float],
         history_orders: Sequence[tuple[str, Callable[[Items], Order]]] = BY_HISTORY) -> int:
    """`read` gives a report's items (each with an "id") or the one line that says why there are none; `orders`
    are replayed on them, and `history_orders` (longest first by its seconds) by an earlier run's seconds where
    --history names that run's report."""
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
    replayed = list(orders)
    if history:
        known = len({item["id"] for item in items} & {item["id"] for item in history})
        replayed += [(f"{name} ({known} of {len(items)} known)", order_by(history)) for name, order_by in history_orders]
    for name, first in replayed:
        print(f"  {name:<52} {replay(items, first):7.1f} s")
    return 0
