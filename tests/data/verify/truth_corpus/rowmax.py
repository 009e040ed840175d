"""Truth corpus: row max, twice: once with NaN propagation required, once declared nan_policy="ignore".

tl.max / tl.maximum with the default propagate_nan=NONE lower to maxnum, which drops NaN like C's fmaxf (Triton's
interpreter models it with numpy.fmax / nanmax). Whether that is right is the spec's call:

- rowmax (nan_policy="propagate", as torch.amax): good_rowmax_propagate_triton propagates NaN explicitly and is
  correct; bad_rowmax_fmax_triton drops it (a swallowed NaN).
- rowmax_fmax (nan_policy="ignore", e.g. a max used for a clipping scale where NaN rows are filtered elsewhere):
  good_rowmax_fmax_triton, the same fmaxf-style kernel, is correct; bad_rowmax_pad_zero_triton pads the tail
  with 0.0 instead of -inf, so an all-negative row (likely when N is small: tiles are at least 128 wide) comes out 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

rowmax = opgate.Operator(
    "rowmax",
    reference=lambda x: x.amax(dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="normal")],
    dims={"M": [8, 5], "N": [512, 128]},
    dtypes=["float32"],
)

rowmax_fmax = opgate.Operator(
    "rowmax_fmax",
    reference=lambda x: x.amax(dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="normal")],
    dims={"M": [8, 5], "N": [512, 128]},
    dtypes=["float32"],
    nan_policy="ignore",
)

MAX_TILE = 512
MIN_TILE = 128  # one tile shape for every short row: fewer recompilations


@triton.jit
def _rowmax(x_ptr, y_ptr, N, sxm, sxn, TILE: tl.constexpr, PROPAGATE: tl.constexpr, PAD_NEG_INF: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, TILE)
    if PAD_NEG_INF:
        pad = float("-inf")
    else:
        pad = 0.0
    m = tl.full([TILE], float("-inf"), tl.float32)
    n_nan = tl.zeros([TILE], dtype=tl.int32)
    for start in range(0, N, TILE):
        cols = start + offs
        x = tl.load(x_ptr + row * sxm + cols * sxn, mask=cols < N, other=pad).to(tl.float32)
        m = tl.maximum(m, x)
        n_nan += (x != x).to(tl.int32)
    out = tl.max(m, 0)
    if PROPAGATE:
        out = tl.where(tl.sum(n_nan, 0) > 0, float("nan"), out)
    tl.store(y_ptr + row, out.to(y_ptr.dtype.element_ty))


def _launch(x: torch.Tensor, propagate: bool, pad_neg_inf: bool = True) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return y
    tile = min(max(triton.next_power_of_2(N), MIN_TILE), MAX_TILE)
    _rowmax[(M,)](x, y, N, x.stride(0), x.stride(1), TILE=tile, PROPAGATE=propagate, PAD_NEG_INF=pad_neg_inf)
    return y


@rowmax.implementation("good_rowmax_propagate_triton", backend="triton")
def good_rowmax_propagate_triton(x):
    return _launch(x, propagate=True)


@rowmax.implementation("bad_rowmax_fmax_triton", backend="triton")
def bad_rowmax_fmax_triton(x):
    return _launch(x, propagate=False)


@rowmax_fmax.implementation("good_rowmax_fmax_triton", backend="triton")
def good_rowmax_fmax_triton(x):
    return _launch(x, propagate=False)


@rowmax_fmax.implementation("good_rowmax_fmax_propagating_triton", backend="triton")
def good_rowmax_fmax_propagating_triton(x):
    return _launch(x, propagate=True)


@rowmax_fmax.implementation("bad_rowmax_pad_zero_triton", backend="triton")
def bad_rowmax_pad_zero_triton(x):
    return _launch(x, propagate=False, pad_neg_inf=False)
