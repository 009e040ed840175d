"""Refuse, before any allocation, a case too large for this machine's memory.

`dims={"M": [1 << 20], "N": [1 << 20]}` asks for a 2^40-element tensor: 8 TB in float64. Allocating it
raised a RuntimeError deep in torch (exit 3). The parent computes every case's truth in float64 and a
baseline in the dtype under test, so a case needs at least the float64 and the dtype copies of every
input; when that lower bound is over the memory available now, the run stops with exit 2 naming the
case and the size.
"""

from __future__ import annotations

import math
from typing import Sequence

from opgate.model.errors import InputError
from opgate.probes.host_memory import available_memory_bytes
from opgate.verify.inputs import Case
from opgate.core.dtypes import ITEMSIZE
from opgate.core.spec import FLOAT_DTYPES, Operator



def case_input_bytes(op: Operator, case: Case, dtype: str) -> int:
    """Lower bound of what one case allocates here: each input as float64 truth plus its working dtype."""
    dims = op.with_derived({k: v for k, v in case.dims if k not in op.derived_dims})
    total = 0
    for spec in op.tensor_inputs:
        numel = math.prod(spec.concrete_shape(dims))
        name = spec.dtype or dtype
        truth = 8 if name in FLOAT_DTYPES else 0  # float inputs get a float64 twin for the truth
        total += numel * (ITEMSIZE.get(name, 8) + truth)
    return total


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB", "EB"):
        if n < 1000 or unit == "EB":
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} EB"


def refuse_oversized_cases(op: Operator, cases: Sequence[Case], dtype: str, available: int | None = None) -> None:
    """InputError (exit 2) for the largest case whose inputs alone exceed the memory available now."""
    available = available_memory_bytes() if available is None else available
    if available is None or not cases:
        return
    biggest = max(cases, key=lambda case: case_input_bytes(op, case, dtype))
    needed = case_input_bytes(op, biggest, dtype)
    if needed <= available:
        return
    sizes = ",".join(f"{k}={v}" for k, v in biggest.dims)
    raise InputError(
        f"spec file {op.spec_file}: operator {op.name!r} case {sizes} ({dtype}) needs at least {_human(needed)} "
        f"of memory for its inputs (float64 truth + {dtype} copy) and this machine has {_human(available)} "
        f"available; lower the sizes in dims (keep production sizes in perf_dims, which only the GPU stage uses)"
    )
