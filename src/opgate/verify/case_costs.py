"""What each case of one implementation cost in its other dtypes' numerics checks, shared through a small file.

A check predicts a case's cost from the cases it has run (verify/time_budget.py): a size model, which a kernel whose
launch grid does not follow the input's size defeats. Under Triton's interpreter fla's causal_conv1d kernels launch
about 30 times the programs a B=31, T=3, D=511 case's rows predict, so that case, the only one of its regime x
layout, cost 43-45 s in every dtype while predicted at a few seconds (thirtieth session), and the third dtype's 41 s
check ran 74 s. Every dtype's check runs the same cases on the same implementation, so a case measured in one dtype
predicts it in the next far better than any model: each check appends what it measured here, and reads what the
other dtypes' checks measured before it decides on a case. Each dtype's plan draws its own fuzzed sizes, so a case
measured there also predicts one here whose sizes are all within 1% of its own (near_dims): fla_local_cumsum's
B=1, T=1, H=65537 case was stopped after 40 s in float32, and the float16 check, predicting its H=65535 case at
1.4 s by the size model, ran it until it was stopped 18 s later (thirty-fifth session).

A case still running in another dtype's check counts too, as a lower bound: each check also appends a line when it
starts a case, and until that case's cost line comes, the other checks read it as costing at least the seconds since
it started (while the process that started it lives). The dtypes' checks run side by side, so without it a check
reached the case another dtype had been stuck in for half a minute and predicted it by the size model.

One file per spec x operator x implementation in the run's folder, a JSON line per measured case. Lines are short
and appended with one write each (O_APPEND), so checks running side by side never interleave them; a line that does
not parse (a check killed mid-write) is skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from opgate.engine.gpu_guard import process_alive


def case_costs_path(workdir: Path, spec_file: Path, op: str, implementation: str) -> Path:
    """The file the numerics checks of one implementation of one operator share (every dtype's)."""
    key = hashlib.sha256(f"{spec_file}\0{op}\0{implementation}".encode()).hexdigest()[:16]
    return workdir / "case-costs" / f"{key}.jsonl"


@dataclass(frozen=True)
class MeasuredCost:
    """The longest a case took in another dtype's check; `stopped`: it was stopped then, so it costs at least that.
    `dims`: the case's sizes ((name, size) pairs), where the line recorded them."""

    seconds: float
    stopped: bool
    dims: tuple[tuple[str, int], ...] = ()


# Sizes this close to a measured case's, in every dim, cost about what it cost: the plan puts its edge sizes in pairs
# either side of a block (65535 and 65537), and each dtype's plan draws its own, so the exact label rarely matches.
NEAR_DIM_RATIO = 1.01


def near_dims(mine: tuple[tuple[str, int], ...], theirs: tuple[tuple[str, int], ...]) -> bool:
    """Whether two cases have the same dims, each size within NEAR_DIM_RATIO of the other (0 only matches 0)."""
    if not theirs or [name for name, _ in mine] != [name for name, _ in theirs]:
        return False
    return all(a == b or (min(a, b) > 0 and max(a, b) <= NEAR_DIM_RATIO * min(a, b))
               for (_, a), (_, b) in zip(mine, theirs))


# How often the lower bounds of the cases running elsewhere are brought up to date when the file has not grown
RUNNING_REFRESH_S = 1.0


@dataclass(frozen=True)
class RunningCase:
    """A case another dtype's check started and has not yet recorded: since when (epoch seconds), in which process."""

    started: float
    pid: int
    dims: tuple[tuple[str, int], ...]


@dataclass
class CaseCostLog:
    """Appends this check's measured cases and reads the other dtypes' ones. A log without a path does nothing."""

    path: Path | None
    dtype: str
    clock: Callable[[], float] = time.time  # epoch seconds: the checks are separate processes
    alive: Callable[[int], bool] = process_alive
    _size: int = -1
    _offset: int = 0  # bytes of whole lines read so far
    _built_at: float = 0.0
    _finished: dict[str, MeasuredCost] = field(default_factory=dict)
    _running: dict[tuple[str, str], RunningCase] = field(default_factory=dict)  # (dtype, label) -> its start
    _costs: dict[str, MeasuredCost] = field(default_factory=dict)

    def started(self, label: str, dims: tuple[tuple[str, int], ...] = ()) -> None:
        """This check starts case `label`: the others count it as running until its cost line comes."""
        self._append({"case": label, "dtype": self.dtype, "started": round(self.clock(), 3), "pid": os.getpid(),
                      "dims": [[name, size] for name, size in dims]})

    def record(self, label: str, seconds: float, stopped: bool = False,
               dims: tuple[tuple[str, int], ...] = ()) -> None:
        self._append({"case": label, "dtype": self.dtype, "s": round(seconds, 4), "stopped": stopped,
                      "dims": [[name, size] for name, size in dims]})

    def _append(self, entry: dict[str, object]) -> None:
        if self.path is None:
            return
        line = json.dumps(entry) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError:
            return  # a prediction aid: a check never fails for want of it

    def others(self) -> dict[str, MeasuredCost]:
        """Case label -> its cost in the other dtypes' checks so far, a case running there as `stopped` at the seconds
        it has run (re-read when the file grew; the running ones brought up to date every RUNNING_REFRESH_S). The
        same mapping comes back until something changed: the fitter keys its caches by it."""
        if self.path is None:
            return {}
        try:
            size = self.path.stat().st_size
        except OSError:
            return {}
        now = self.clock()
        if size != self._size:
            self._size = size
            self._read_new_lines()
        elif not self._running or now - self._built_at < RUNNING_REFRESH_S:
            return self._costs
        self._built_at = now
        self._costs = self._with_running(now)
        return self._costs

    def _with_running(self, now: float) -> dict[str, MeasuredCost]:
        costs = dict(self._finished)
        for (_, label), case in list(self._running.items()):
            if not self.alive(case.pid):  # its check's process died in it: the case's cost is unknown, not growing
                continue
            bound = MeasuredCost(max(0.0, now - case.started), True, case.dims)
            known = costs.get(label)
            if known is None or bound.seconds > known.seconds:
                costs[label] = bound
        return costs

    def _read_new_lines(self) -> None:
        """Parse the whole lines appended since the last read (a check reads the file before each case it ranks, and
        every dtype's check appends two lines a case: read whole each time, a GPU plan of hundreds of cases would
        parse it quadratically). A line not yet ended (being written, or torn by a killed check) waits."""
        assert self.path is not None
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return
        end = chunk.rfind(b"\n") + 1
        self._offset += end
        self._parse_into(chunk[:end].decode(errors="replace"))

    def _parse_into(self, text: str) -> None:
        costs, running = self._finished, self._running
        for line in text.splitlines():
            try:
                entry = json.loads(line)
                label, dtype = entry["case"], entry["dtype"]
                dims = tuple((str(name), int(size)) for name, size in entry.get("dims", ()))
                if "started" in entry:
                    start = RunningCase(float(entry["started"]), int(entry["pid"]), dims)
                else:
                    seconds, stopped = float(entry["s"]), bool(entry["stopped"])
            except (ValueError, KeyError, TypeError):
                continue
            if dtype == self.dtype or not isinstance(label, str):
                continue
            if "started" in entry:
                running[(dtype, label)] = start
                continue
            running.pop((dtype, label), None)
            known = costs.get(label)
            if known is None or seconds > known.seconds:  # the longest run says the most about the cost
                costs[label] = MeasuredCost(seconds, stopped, dims)
