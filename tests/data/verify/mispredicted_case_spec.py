"""A correct Triton kernel whose program count the case sizes hide: one program per column of x (T, H), each
holding the whole column. Its cost under Triton's interpreter follows H, the programs, while opgate predicts a case
from its elements and rows; at T=1, H=65537 (a size the plan adds) the prediction is ~1000x low, as for fla's global
cumsum (B=1, T=1, H=65537: predicted ~9 s, took 185 s). The numerics check must stop that case once its budget is
spent and say so, not run on (tests/verify/test_verify_time_budget.py)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate


@triton.jit
def _scale_columns(x, y, T, H, BLOCK_T: tl.constexpr):
    column = tl.program_id(0)
    rows = tl.arange(0, BLOCK_T)
    inside = rows < T
    values = tl.load(x + rows * H + column, mask=inside, other=0.0)
    tl.store(y + rows * H + column, values * 2.0, mask=inside)


column_scale = opgate.Operator(
    "column_scale",
    reference=lambda x: x * 2.0,
    inputs=[opgate.TensorSpec("x", ("T", "H"))],
    dims={"T": [1000, 256], "H": [4, 3]},
    dtypes=["float32"],
)


@column_scale.implementation("columns", backend="triton")
def _columns(x):
    x = x.contiguous()
    T, H = x.shape
    y = torch.empty_like(x)
    if x.numel():
        _scale_columns[(H,)](x, y, T, H, BLOCK_T=triton.next_power_of_2(max(T, 1)))
    return y
