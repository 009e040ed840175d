"""A reference whose arithmetic uses a dim's size (scaling by 1/sqrt(N), as attention does with the head dim).

TVM 0.27's Relax frontend cannot import that symbolic arithmetic (sym_float, pow, truediv of a dynamic
dim), so opgate's TVM backend fixes the dim N and builds once per size of N (tests/verify/test_verify_tvm.py).
"""

from __future__ import annotations

import torch

import opgate

scaled_rows = opgate.Operator(
    "scaled_rows",
    reference=lambda x: torch.softmax(x / x.shape[-1] ** 0.5, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")],
    dims={"M": [4, 3], "N": [16, 8]},
    dtypes=["float32", "bfloat16"],
)
