"""Shrinking: from a failing case, the smallest case that still fails.

Dims are shrunk one at a time toward small sizes (trying the smallest first, so a tail bug lands on
the first size that has a tail), for as long as the case still fails; then the layout is simplified
to contiguous and the regime to typical when the failure survives that. Every attempt is a real
run of the implementation, bounded by `max_attempts` and by the check's time budget (`time_up`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from opgate.verify.inputs import Case
from opgate.core.spec import Operator

# Sizes tried for a dim, smallest first; sizes at or above the failing size are never tried.
_SMALL_SIZES = (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257,
                511, 512, 513, 1023, 1024, 1025, 2047, 2048, 2049)


@dataclass
class ShrinkResult:
    case: Case
    attempts: int
    steps: list[str] = field(default_factory=list)


def candidate_sizes(op: Operator, dim: str, current: int) -> list[int]:
    if dim in op.exact_dims:
        return sorted(s for s in op.dims[dim] if s < current)
    sizes = {s for s in _SMALL_SIZES if s < current}
    sizes.update(s for s in (current // 2, current - 1, (current + 1) // 2) if 1 <= s < current)
    return sorted(sizes)


def shrink_case(op: Operator, case: Case, still_fails: Callable[[Case], bool], max_attempts: int = 40,
                time_up: Callable[[], bool] = lambda: False) -> ShrinkResult:
    """Greedy shrink; `still_fails(case)` runs the implementation and judges it. Once `time_up()` says so, no attempt
    starts: the smallest failing case found so far stands (every attempt's case failed, so any is a true repro)."""
    best = case
    attempts = 0
    steps: list[str] = []
    changed = True
    while changed and attempts < max_attempts and not time_up():
        changed = False
        for dim, size in best.dims:
            for smaller in candidate_sizes(op, dim, size):
                if attempts >= max_attempts or time_up():
                    break
                trial = best.with_dims({**best.dims_dict, dim: smaller}, origin="shrunk")
                attempts += 1
                if still_fails(trial):
                    steps.append(f"{dim}: {size} -> {smaller}")
                    best = trial
                    changed = True
                    break
    for attr, simple in (("layout", "contiguous"), ("regime", "typical")):
        if getattr(best, attr) != simple and attempts < max_attempts and not time_up():
            trial = Case(best.dims, best.seed, simple if attr == "regime" else best.regime,
                         simple if attr == "layout" else best.layout, "shrunk")
            attempts += 1
            if still_fails(trial):
                steps.append(f"{attr}: {getattr(best, attr)} -> {simple}")
                best = trial
    if best is not case and best.origin != "shrunk":
        best = Case(best.dims, best.seed, best.regime, best.layout, "shrunk")
    return ShrinkResult(best, attempts, steps)
