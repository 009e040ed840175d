"""Truth corpus: scans along the last dim (inclusive cumsum and the suffix sum used by chunked recurrences).

Correct
- good_cumsum_blockcarry_triton: tiles of 256 columns; tl.cumsum inside the tile plus the running carry of the
  earlier tiles (a blockwise scan), all float32.
- good_cumsum_sequential_torch: a strictly sequential float32 scan (numpy add.accumulate).
- good_suffix_blockcarry_triton: the suffix sum s[i] = sum_{j>=i} x[j], tiles walked from the end, a reversed
  in-tile scan plus the carry of the later tiles.

Buggy
- bad_cumsum_no_carry_triton: forgets the carry between tiles (right for N <= 256 only).
- bad_suffix_total_minus_prefix_triton: the suffix as total - exclusive prefix (one pass for the total, one
  forward scan): algebraically equal, but with 1e8 next to 1 in a row the subtraction cancels every digit of the
  small suffixes after the large entry.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

import opgate

cumsum = opgate.Operator(
    "cumsum",
    reference=lambda x: torch.cumsum(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="normal")],
    dims={"M": [4, 3], "N": [256, 1024]},
    dtypes=["float32"],
    flops=lambda M, N: M * N,
)

suffix_sum = opgate.Operator(
    "suffix_sum",
    reference=lambda x: torch.flip(torch.cumsum(torch.flip(x, dims=[-1]), dim=-1), dims=[-1]),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="normal")],
    dims={"M": [4, 3], "N": [256, 1024]},
    dtypes=["float32"],
    flops=lambda M, N: M * N,
)

TILE = 256


@triton.jit
def _cumsum(x_ptr, y_ptr, N, sxm, sxn, sym, TILE: tl.constexpr, CARRY: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, TILE)
    carry = 0.0
    for start in range(0, N, TILE):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_ptr + row * sxm + cols * sxn, mask=mask, other=0.0).to(tl.float32)
        y = tl.cumsum(x, 0)
        if CARRY:
            y = y + carry
            carry = carry + tl.sum(x, 0)
        tl.store(y_ptr + row * sym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_cumsum(x: torch.Tensor, carry: bool) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return y
    _cumsum[(M,)](x, y, N, x.stride(0), x.stride(1), y.stride(0), TILE=TILE, CARRY=carry)
    return y


@cumsum.implementation("good_cumsum_blockcarry_triton", backend="triton")
def good_cumsum_blockcarry_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch_cumsum(x, carry=True)


@cumsum.implementation("good_cumsum_sequential_torch", backend="torch")
def good_cumsum_sequential_torch(x: torch.Tensor) -> torch.Tensor:
    xs = x.detach().to("cpu", torch.float32).numpy()
    out = np.add.accumulate(xs, axis=-1, dtype=np.float32) if xs.size else xs.copy()
    return torch.from_numpy(np.ascontiguousarray(out)).to(device=x.device, dtype=x.dtype)


@cumsum.implementation("bad_cumsum_no_carry_triton", backend="triton")
def bad_cumsum_no_carry_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch_cumsum(x, carry=False)


@triton.jit
def _suffix(x_ptr, y_ptr, N, sxm, sxn, sym, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, TILE)
    carry = 0.0
    n_tiles = tl.cdiv(N, TILE)
    for t in range(0, n_tiles):
        start = (n_tiles - 1 - t) * TILE
        cols = start + offs
        mask = cols < N
        x = tl.load(x_ptr + row * sxm + cols * sxn, mask=mask, other=0.0).to(tl.float32)
        y = tl.cumsum(x, 0, reverse=True) + carry
        carry = carry + tl.sum(x, 0)
        tl.store(y_ptr + row * sym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _suffix_total_minus_prefix(x_ptr, y_ptr, N, sxm, sxn, sym, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, TILE)
    acc = tl.zeros([TILE], dtype=tl.float32)
    for start in range(0, N, TILE):
        cols = start + offs
        acc += tl.load(x_ptr + row * sxm + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)
    total = tl.sum(acc, 0)
    prefix = 0.0
    for start in range(0, N, TILE):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_ptr + row * sxm + cols * sxn, mask=mask, other=0.0).to(tl.float32)
        exclusive = prefix + tl.cumsum(x, 0) - x
        tl.store(y_ptr + row * sym + cols, (total - exclusive).to(y_ptr.dtype.element_ty), mask=mask)
        prefix = prefix + tl.sum(x, 0)


def _launch_suffix(kernel, x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return y
    kernel[(M,)](x, y, N, x.stride(0), x.stride(1), y.stride(0), TILE=TILE)
    return y


@suffix_sum.implementation("good_suffix_blockcarry_triton", backend="triton")
def good_suffix_blockcarry_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch_suffix(_suffix, x)


@suffix_sum.implementation("bad_suffix_total_minus_prefix_triton", backend="triton")
def bad_suffix_total_minus_prefix_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch_suffix(_suffix_total_minus_prefix, x)
