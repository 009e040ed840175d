"""What each case of one implementation cost in its other dtypes' numerics checks, shared through a small file.

A check predicts a case's cost from the cases it has run (verify/time_budget.py): a size model, which a kernel whose
launch grid does not follow the input's size defeats. Under Triton's interpreter fla's causal_conv1d kernels launch
about 30 times the programs a B=31, T=3, D=511 case's rows predict, so that case, the only one of its regime x
layout, cost 43-45 s in every dtype while predicted at a few seconds (thirtieth session), and the third dtype's 41 s
check ran 74 s. Every dtype's check runs the same cases on the same implementation, so a case measured in one dtype
predicts it in the next far better than any model: each check appends what it measured here, and reads what the
other dtypes' checks measured before it decides on a case.

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
    """The longest a case took in another dtype's check; `stopped`: it was stopped then, so it costs at least that."""

    seconds: float
    stopped: bool


@dataclass
class CaseCostLog:
    """Appends this check's measured cases and reads the other dtypes' ones. A log without a path does nothing."""

    path: Path | None
    dtype: str
    _size: int = -1
    _costs: dict[str, MeasuredCost] = field(default_factory=dict)

    def record(self, label: str, seconds: float, stopped: bool = False) -> None:
        if self.path is None:
            return
        line = json.dumps({"case": label, "dtype": self.dtype, "s": round(seconds, 4), "stopped": stopped}) + "\n"
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
            except (ValueError, KeyError, TypeError):
                continue
            if dtype == self.dtype or not isinstance(label, str):
                continue
            known = costs.get(label)
            if known is None or seconds > known.seconds:  # the longest run says the most about the cost
                costs[label] = MeasuredCost(seconds, stopped)
        return costs
