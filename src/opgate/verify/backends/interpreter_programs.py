"""The Triton programs a call launches under Triton's CPU interpreter, counted while it runs or in a dry run.

Under the interpreter a case's time follows the programs its kernels launch, not its elements: over the 36 distinct
shapes of fla_short_conv.grad's plan the programs put every case within 1.2x of its time, the elements up to 24x off
(B=63, T=2, D=33: 4,323 elements, 567 programs, 6.8 s; docs/benchmarks.md, benchmarks/interpreter_cost_model.py).
A time budget that predicted such a case from its elements admitted it, and the operator overran its 180 s goal.

A dry run calls the implementation with every launch counted and not run: the wrapper's own work (allocations, grid
arithmetic) runs, the kernels do not, so it costs milliseconds where the case costs seconds. Its count is right where
the launches do not depend on what earlier kernels wrote; the numerics check compares it with the count of the real
call and stops using the counts where they disagree (verify/time_budget.py CaseTimer).

The count wraps `triton.runtime.interpreter.GridExecutor.__call__` (Triton 3.x), once per process; where that is not
there, nothing is counted and the budget keeps its element model.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from typing import Any, Callable, Iterator

_STATE: dict[str, Any] = {"installed": None, "programs": 0, "dry": False}


def install() -> bool:
    """Wrap the interpreter's grid executor (once); False where this Triton has none to wrap."""
    if _STATE["installed"] is not None:
        return bool(_STATE["installed"])
    try:
        from triton.runtime import interpreter

        original = interpreter.GridExecutor.__call__
    except (ImportError, AttributeError):
        _STATE["installed"] = False
        return False

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        _STATE["programs"] += _grid_programs(self, args, kwargs)
        return None if _STATE["dry"] else original(self, *args, **kwargs)

    interpreter.GridExecutor.__call__ = counted
    _STATE["installed"] = True
    return True


def _grid_programs(executor: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """The programs one launch starts: the product of its grid (a callable grid gets the kernel's named arguments,
    as the interpreter gives them); 0 where the grid cannot be read."""
    try:
        grid = executor.grid
        if callable(grid):
            spec = inspect.getfullargspec(executor.fn)
            named = inspect.getcallargs(executor.fn, *args, **{k: v for k, v in kwargs.items()
                                                               if k in spec.args or k in spec.kwonlyargs})
            grid = grid(named)
        programs = 1
        for extent in grid:
            programs *= max(0, int(extent))
        return programs
    except Exception:  # a grid this reading does not understand: the launch still runs, uncounted
        return 0


@contextlib.contextmanager
def counting() -> Iterator[dict[str, int]]:
    """Within: the launches are counted (and run); the dict's "programs" holds the count once the block ends."""
    counted = {"programs": 0}
    before = _STATE["programs"]
    try:
        yield counted
    finally:
        counted["programs"] = _STATE["programs"] - before


def dry_count(call: Callable[[], Any]) -> int | None:
    """The programs `call` would launch, its launches counted and not run; None where it raised (a wrapper that reads
    what a kernel wrote) or the grid executor could not be wrapped."""
    if not install():
        return None
    before = _STATE["programs"]
    _STATE["dry"] = True
    try:
        call()
    except Exception:
        return None
    finally:
        _STATE["dry"] = False
    return _STATE["programs"] - before


# "0": no dry runs, the budget's element model alone (benchmarks/interpreter_program_budget.py measures both ways)
ENV = "OPGATE_INTERPRETER_PROGRAMS"
# Seconds a check spends on dry runs at most: each generates its case's inputs, which for the largest cases costs a
# good part of a second; the cases left uncounted keep the element model.
DRY_RUNS_S = 5.0


def plan_programs(op: Any, choice: Any, dtype: str, cases: Any, clock: Callable[[], float]) -> list[int]:
    """Per case of the plan, the programs a dry run of the implementation launches (0: not counted). One dry run per
    distinct shape and layout, largest last (the small ones are the cheap ones to count), within DRY_RUNS_S."""
    import torch

    from opgate.verify.backends.base import implementation_function
    from opgate.verify.inputs import apply_layout, case_input_elements, make_inputs

    if os.environ.get(ENV, "").strip() == "0" or not install():
        return [0] * len(cases)
    function = implementation_function(op, choice)
    counts: dict[tuple[Any, str], int] = {}
    began = clock()
    for case in sorted(cases, key=lambda case: case_input_elements(op, case)):
        key = (case.dims, case.layout)
        if key in counts or case.is_empty:
            continue
        if clock() - began > DRY_RUNS_S:
            break
        generated = make_inputs(op, case, dtype)
        values = [apply_layout(v, layout) if isinstance(v, torch.Tensor) else v
                  for v, layout in zip(generated.values, generated.layout_applied)]

        def call() -> None:
            with torch.no_grad():
                function(*values)

        counts[key] = dry_count(call) or 0
    return [counts.get((case.dims, case.layout), 0) for case in cases]
