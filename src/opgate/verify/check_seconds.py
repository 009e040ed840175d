"""How long each numerics check took in earlier runs, so that a run starts the longest of its ready checks first.

The runner takes the ready numerics checks of a library first come, first served: in the order their plans were
written. Their plans come faster than the slots free (a library's calibration runs beside the checks), so a check
waits in a backlog: a median 74 s from its plan to its start on the H100 host (fifty-fifth session). A check that
is long and whose plan comes late then ends the numerics alone: FlagGems' rms_norm.grad, whose plans were written at
251 s, began at 334 s and compiled one kernel for 59-67 s, and the numerics ended at 426 s. Started longest first, the
same checks on the slots the run gave them would have ended at 376 s, replayed offline from that run
(benchmarks/numerics_queue_replay.py). Nothing known when a plan is written predicts a check's length (its cases,
shapes, sizes, the reference's time, the calibration's: correlations of 0.35 at best), but the same check's length
in an earlier run does: ordered by the seconds of an earlier run of the same code on another H100, the replay ends
at 380 s (395 s by those of a run whose compile-ahead tasks ran otherwise); over five runs, 41-54 s before first
come, first served.

So each run keeps its numerics checks' seconds in opgate's cache folder (check-seconds.json: "<scope> <check id>" ->
seconds; the scope is the budget and whether a GPU ran it, since a quick run's or a CPU run's seconds say nothing of
a default run on a GPU; a replay, which runs one case, keeps none). The next run's calibrator hands each numerics
task over with the seconds its check took before (CheckTask.expected_s), ranked where it is long (LONG_CHECK_S); a check not seen before gets the median of
those known, so it neither jumps the queue nor waits behind it. The runner queues a ready check before the waiting
ones of its order expected to take less (runner._arrival_position). Without a history every expectation is None
and nothing changes: a first run, and a run with the cache off (OPGATE_CACHE=0). The seconds only order the queue;
they never change a verdict.

The runtime stage's warm-ups (verify/builtin_stages.RuntimeStage: a call at the timing size that compiles and
autotunes, side by side, before each exclusive timing) are ordered the same way. They are all queued when the run
starts, in the operators' order, and take two slots of sixteen while the numerics run; the runtime checks wait for
the last of them. With the numerics ordered by their history, the warm-ups ended 36 s after the last numerics check
on an H100 (fifty-sixth session: fla's global cumsum's three warm-ups, 33 s each, begun after it). They are queued
longest first by an earlier run's seconds too, each weighed with the warm-ups that start after it (chained_seconds):
a gradient twin's warm-up waits for its operator's, which is short, and queued by its own seconds alone that one
came late and held the long one back (fifty-seventh session, an H100: gradient warm-ups of 18-32 s began at
309-343 s, as the numerics ended at 326 s). On the slots three earlier runs gave their warm-ups, the chain order by
another run's seconds ends them 8-16 s before the run's own order and 0.4-8.6 s before longest first by the same
seconds (benchmarks/warm_up_queue_replay.py). A warm-up reports no result, so its seconds come from the report's
timeline (extra.timeline: check id -> [start, end]); they include any wait for GPU memory, which holds the slot too.
On a host of several GPUs the fan-out (verify/gpu_fanout.py) orders each GPU's queue by its own rule instead.

Where this helps is a library judged again in full (after an upgrade of torch, Triton or opgate every stored verdict
is stale and Triton compiles every kernel again, as in a first run), and a run resumed after a CI time limit.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from opgate.model.results import CheckResult, Outcome
from opgate.verify.resumed import WARM_UP_SUFFIX  # a runtime warm-up's id: "<its runtime check's id>_warm_up"

if TYPE_CHECKING:
    from opgate.engine.runner import CheckTask

FILE = "check-seconds.json"
FORMAT = 1
STAGE = "numerics"
# At most this many checks are kept (the most recent win): a cache folder shared by many libraries stays small.
MOST_KEPT = 20000
# A check expected to take this long or longer is handed over `ranked` (CheckTask.ranked): it keeps its place against
# the runner's idle-worker lookahead, since starting a warm worker for it (its imports, seconds) costs less than the
# minute a long check queued behind shorter ones can add to the run's end. A margin, not a measurement.
LONG_CHECK_S = 30.0


def _path() -> Path | None:
    from opgate.verify.bounds_cache import cache_root

    root = cache_root()
    return root / FILE if root is not None else None


def load(path: Path | None = None) -> dict[str, float]:
    """The recorded seconds by check id; empty where there are none, the cache is off or the file is unreadable
    (the order is then first come, first served, as without a history)."""
    path = path if path is not None else _path()
    if path is None:
        return {}
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    seconds = body.get("seconds") if isinstance(body, dict) and body.get("format") == FORMAT else None
    if not isinstance(seconds, dict):
        return {}
    return {str(k): float(v) for k, v in seconds.items() if isinstance(v, (int, float)) and v >= 0}


def scope(budget: str, gpu: bool) -> str:
    """The runs whose seconds compare: one budget, on a GPU or not."""
    return f"{budget}:{'gpu' if gpu else 'cpu'}"


def measured(results: Iterable[CheckResult], where: str,
             timeline: Mapping[str, Any] | None = None) -> dict[str, float]:
    """The seconds worth keeping, keyed within `where` (scope()): the numerics checks that ran to a verdict (not an
    error, not skipped), and the runtime warm-ups that ended, from the report's `timeline` (id -> [start, end])."""
    kept = {f"{where} {r.check_id}": round(float(r.duration_s), 3) for r in results
            if r.stage == STAGE and r.outcome not in (Outcome.ERROR, Outcome.SKIPPED) and r.duration_s > 0}
    for check_id, span in (timeline or {}).items():
        if (str(check_id).endswith(WARM_UP_SUFFIX) and isinstance(span, (list, tuple)) and len(span) >= 2
                and all(isinstance(t, (int, float)) for t in span[:2]) and span[1] > span[0]):
            kept[f"{where} {check_id}"] = round(float(span[1]) - float(span[0]), 3)
    return kept


def record(results: Iterable[CheckResult], where: str, path: Path | None = None,
           timeline: Mapping[str, Any] | None = None) -> int:
    """Merge this run's seconds (`where`: scope(); measured()) into the file, atomically; how many were recorded (0
    where the cache is off or cannot be written: the history only orders, so a failure to keep it is silent)."""
    path = path if path is not None else _path()
    new = measured(results, where, timeline)
    if path is None or not new:
        return 0
    merged = {k: v for k, v in load(path).items() if k not in new}
    merged.update(new)
    if len(merged) > MOST_KEPT:
        merged = dict(list(merged.items())[-MOST_KEPT:])
    from opgate.engine.atomic import write_atomically
    from opgate.model.errors import InputError

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps({"format": FORMAT, "seconds": merged}), durable=False)
    except (OSError, InputError):
        return 0
    return len(new)


def chained_seconds(tasks: Iterable[CheckTask]) -> dict[str, float]:
    """Each task's expected seconds (CheckTask.expected_s; 0 where not known) with those of the longest chain of the
    tasks that start after it (CheckTask.after): what a queue ordered longest first must weigh it by. A gradient
    twin's warm-up starts after its operator's own, which is short (fla's l2norm: 11 s, then 32 s for its gradient's),
    so queued by its own seconds it came late and held its long one back to the end: on an H100 (fifty-seventh
    session) FlagGems' layer-norm and fla's l2norm gradient warm-ups, 18-32 s each, began at 309-343 s, as the numerics
    ended. Without a history every task weighs 0 and the queue keeps the operators' order."""
    tasks = list(tasks)
    waiting_for: dict[str, list[CheckTask]] = {}
    for task in tasks:
        for before in task.after:
            waiting_for.setdefault(before, []).append(task)
    chained: dict[str, float] = {}

    def weigh(task: CheckTask, seen: frozenset[str]) -> float:
        if task.check_id not in chained:
            later = [weigh(t, seen | {task.check_id}) for t in waiting_for.get(task.check_id, ())
                     if t.check_id not in seen]  # a cycle (none is made) would only end the chain
            chained[task.check_id] = (task.expected_s or 0.0) + max(later, default=0.0)
        return chained[task.check_id]

    for task in tasks:
        weigh(task, frozenset())
    return chained


class Expectations:
    """What a run expects of its checks' seconds, from the recorded history (`seconds`, as load() gives it) of the
    runs of its scope (`where`: scope()): of its numerics checks, or of its runtime warm-ups (`warm_ups`), each kind
    with the median of its own as the guess for a check not seen before."""

    def __init__(self, seconds: Mapping[str, float], where: str, warm_ups: bool = False) -> None:
        prefix = f"{where} "
        self.warm_ups = warm_ups
        self.seconds = {key.removeprefix(prefix): value for key, value in seconds.items()
                        if key.startswith(prefix) and key.endswith(WARM_UP_SUFFIX) == warm_ups}
        self.prior = statistics.median(self.seconds.values()) if self.seconds else None
        self.known = 0
        self.unknown = 0

    def of(self, check_id: str) -> float | None:
        """The seconds `check_id` took before; the median of those known for a check not seen before; None
        without a history."""
        if self.prior is None:
            return None
        if check_id in self.seconds:
            self.known += 1
            return self.seconds[check_id]
        self.unknown += 1
        return self.prior

    def applies_to(self, task: CheckTask) -> bool:
        """Whether `task` is of this history's kind: a numerics check, or a runtime warm-up (named by its target)."""
        if not self.warm_ups:
            return task.stage == STAGE
        from opgate.verify.resume import WARM_UP_TARGET

        return task.target == WARM_UP_TARGET

    def applied(self, task: CheckTask) -> CheckTask:
        """`task` with the seconds its check is expected to take (CheckTask.expected_s), and `ranked` where that is
        LONG_CHECK_S or more; unchanged without a history or where it is not of this history's kind."""
        import dataclasses

        if not self.applies_to(task):
            return task
        expected = self.of(task.check_id)
        if expected is None:
            return task
        return dataclasses.replace(task, expected_s=expected, ranked=task.ranked or expected >= LONG_CHECK_S)

    def summary(self) -> dict[str, object]:
        """For the report (extra.engine.numerics_order, .warm_up_order): how the checks of its kind were ordered."""
        if self.prior is None:
            return {"by": "queued as planned (no earlier run's seconds)" if self.warm_ups
                    else "plan written (no earlier run's seconds)"}
        return {"by": "earlier runs' seconds, longest first", "known": self.known,
                "unknown_given_the_median": self.unknown, "median_s": round(self.prior, 3)}
