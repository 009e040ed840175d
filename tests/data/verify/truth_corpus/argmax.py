"""Truth corpus: argmax over the last dim, with an empty batch (M = 0) among the declared sizes.

torch.argmax of a (0, N) tensor is an empty int64 tensor. Shipped kernels broke there.

Correct
- good_argmax_triton: one program per row; NaN counts as the largest value (first NaN wins, as torch), otherwise
  the first maximal index (tie_break_left); returns early for M = 0.

Buggy
- bad_argmax_reshape_triton: the same kernel behind a wrapper that flattens with x.reshape(M, -1): for M = 0 the
  -1 is ambiguous and PyTorch raises ("cannot reshape tensor of 0 elements into shape [0, -1]").
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

argmax = opgate.Operator(
    "argmax",
    reference=lambda x: torch.argmax(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="normal")],
    dims={"M": [8, 0], "N": [256, 100]},
    dtypes=["float32"],
)


@triton.jit
def _argmax(x_ptr, y_ptr, N, sxm, sxn, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * sxm + offs * sxn, mask=mask, other=float("-inf")).to(tl.float32)
    is_nan = (x != x) & mask
    first_nan = tl.min(tl.where(is_nan, offs, BLOCK), 0)
    best = tl.argmax(tl.where(is_nan, float("-inf"), x), 0, tie_break_left=True)
    out = tl.where(first_nan < BLOCK, first_nan, best)
    tl.store(y_ptr + row, out.to(tl.int64))


def _launch(x2: torch.Tensor) -> torch.Tensor:
    M, N = x2.shape
    y = torch.empty((M,), dtype=torch.int64, device=x2.device)
    if M == 0:
        return y
    _argmax[(M,)](x2, y, N, x2.stride(0), x2.stride(1), BLOCK=triton.next_power_of_2(N))
    return y


@argmax.implementation("good_argmax_triton", backend="triton")
def good_argmax_triton(x):
    return _launch(x.reshape(-1, x.shape[-1]))


@argmax.implementation("bad_argmax_reshape_triton", backend="triton")
def bad_argmax_reshape_triton(x):
    return _launch(x.reshape(x.shape[0], -1))
