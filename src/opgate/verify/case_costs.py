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

One file per spec x operator x implementation in the run's folder, a JSON line per measured case. Lines are short
and appended with one write each (O_APPEND), so checks running side by side never interleave them; a line that does
not parse (a check killed mid-write) is skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path


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


@dataclass
class CaseCostLog:
    """Appends this check's measured cases and reads the other dtypes' ones. A log without a path does nothing."""

    path: Path | None
    dtype: str
    _size: int = -1
    _costs: dict[str, MeasuredCost] = field(default_factory=dict)

    def record(self, label: str, seconds: float, stopped: bool = False,
               dims: tuple[tuple[str, int], ...] = ()) -> None:
        if self.path is None:
            return
        line = json.dumps({"case": label, "dtype": self.dtype, "s": round(seconds, 4), "stopped": stopped,
                           "dims": [[name, size] for name, size in dims]}) + "\n"
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
        """Case label -> its cost in the other dtypes' checks so far (re-read only when the file grew)."""
        if self.path is None:
            return {}
        try:
            size = self.path.stat().st_size
        except OSError:
            return {}
        if size != self._size:
            self._size = size
            self._costs = self._parse(self.path.read_text(errors="replace"))
        return self._costs

    def _parse(self, text: str) -> dict[str, MeasuredCost]:
        costs: dict[str, MeasuredCost] = {}
        for line in text.splitlines():
            try:
                entry = json.loads(line)
                label, dtype, seconds, stopped = entry["case"], entry["dtype"], float(entry["s"]), bool(entry["stopped"])
                dims = tuple((str(name), int(size)) for name, size in entry.get("dims", ()))
            except (ValueError, KeyError, TypeError):
                continue
            if dtype == self.dtype or not isinstance(label, str):
                continue
            known = costs.get(label)
            if known is None or seconds > known.seconds:  # the longest run says the most about the cost
                costs[label] = MeasuredCost(seconds, stopped, dims)
        return costs
