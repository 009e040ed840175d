"""Truth corpus: row softmax, written the way production kernels are (independently of opgate's own corpus).

Correct
- good_softmax_exp2_triton: one block when the row fits (N <= 1024), else an online pass; exp2(x * log2(e)) as
  FlashAttention and most Triton kernels write it.
- good_softmax_online_triton: always tiled (256 columns), lane-wise online max/sum (each lane keeps its own running
  max and rescaled sum; lanes are combined at the end), with the -inf guard.
- good_softmax_fastexp_torch: a fast-math style exp (range reduction to 2^k * e^r, degree-7 polynomial, ldexp), as
  vectorised CPU libraries and __expf do; about 1-2 ulp.

Buggy (one real class each)
- bad_softmax_no_max_sub_triton: exp(x) without subtracting the row max: overflows at logits above ~88.7.
- bad_softmax_pad_zero_triton: the tail block's padding is loaded as 0.0, not -inf, so padded lanes add exp(0 - m)
  to the sum (a reduction whose tail mask is missing): wrong whenever N is not a power of two.
- bad_softmax_no_rescale_triton: online path forgets to rescale the running sum when the max grows (multi-tile
  path only, N > 1024).
- bad_softmax_inf_nan_multitile_triton: lane-wise online path without the -inf guard: a lane whose first value is
  -inf computes exp(-inf - (-inf)) = NaN. Single-block rows are right; only rows above 1024 columns with a -inf in
  their first tile break.
- bad_softmax_wide_store_triton: one block up to 16384 columns (the common cap); above it a looped path whose store
  loop stops at the last full tile, so the tail columns of rows wider than 16384 are never written.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

import opgate

softmax = opgate.Operator(
    "softmax",
    reference=lambda x: torch.softmax(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")],
    dims={"M": [4, 3], "N": [256, 2048]},
    dtypes=["float32"],
    flops=lambda M, N: 5 * M * N,
)

LOG2E = 1.4426950408889634
ONE_BLOCK_MAX = 1024
TILE = 256
WIDE_CAP = 16384


@triton.jit
def _softmax_exp2(x_ptr, y_ptr, N, sxm, sxn, sym, BLOCK: tl.constexpr, ONE_BLOCK: tl.constexpr,
                  SUB_MAX: tl.constexpr, RESCALE: tl.constexpr, PAD_NEG_INF: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    x_row = x_ptr + row * sxm
    y_row = y_ptr + row * sym
    if PAD_NEG_INF:
        pad = float("-inf")
    else:
        pad = 0.0
    if ONE_BLOCK:
        mask = offs < N
        x = tl.load(x_row + offs * sxn, mask=mask, other=pad).to(tl.float32)
        if SUB_MAX:
            m = tl.max(x, 0)
            m = tl.where(m == float("-inf"), 0.0, m)
            e = tl.exp2((x - m) * 1.4426950408889634)
        else:
            e = tl.exp2(x * 1.4426950408889634)
        tl.store(y_row + offs, (e / tl.sum(e, 0)).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        m = float("-inf")
        s = 0.0
        for start in range(0, N, BLOCK):
            cols = start + offs
            x = tl.load(x_row + cols * sxn, mask=cols < N, other=pad).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, 0))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            if not SUB_MAX:
                m_use = 0.0
            p = tl.sum(tl.exp2((x - m_use) * 1.4426950408889634), 0)
            if RESCALE and SUB_MAX:
                s = s * tl.exp2((m - m_use) * 1.4426950408889634) + p
            else:
                s = s + p
            m = m_new
        m_use = tl.where(m == float("-inf"), 0.0, m)
        if not SUB_MAX:
            m_use = 0.0
        for start in range(0, N, BLOCK):
            cols = start + offs
            mask = cols < N
            x = tl.load(x_row + cols * sxn, mask=mask, other=pad).to(tl.float32)
            y = tl.exp2((x - m_use) * 1.4426950408889634) / s
            tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_exp2(x: torch.Tensor, sub_max: bool = True, rescale: bool = True, pad_neg_inf: bool = True) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return y
    block = min(triton.next_power_of_2(N), ONE_BLOCK_MAX)
    _softmax_exp2[(M,)](x, y, N, x.stride(0), x.stride(1), y.stride(0), BLOCK=block, ONE_BLOCK=N <= block,
                        SUB_MAX=sub_max, RESCALE=rescale, PAD_NEG_INF=pad_neg_inf)
    return y


@triton.jit
def _softmax_lanewise(x_ptr, y_ptr, N, sxm, sxn, sym, TILE: tl.constexpr, GUARD: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, TILE)
    x_row = x_ptr + row * sxm
    y_row = y_ptr + row * sym
    m_lane = tl.full([TILE], float("-inf"), tl.float32)
    s_lane = tl.zeros([TILE], dtype=tl.float32)
    for start in range(0, N, TILE):
        cols = start + offs
        x = tl.load(x_row + cols * sxn, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m_lane, x)
        if GUARD:
            # A lane that has only seen -inf keeps sum 0 instead of exp(-inf - -inf) = NaN.
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_use = m_new
        s_lane = s_lane * tl.exp(m_lane - m_use) + tl.exp(x - m_use)
        m_lane = m_new
    m = tl.max(m_lane, 0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    if GUARD:
        m_lane_safe = tl.where(m_lane == float("-inf"), 0.0, m_lane)
    else:
        m_lane_safe = m_lane
    s = tl.sum(s_lane * tl.exp(m_lane_safe - m_safe), 0)
    for start in range(0, N, TILE):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols * sxn, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(y_row + cols, (tl.exp(x - m_safe) / s).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_one_block(x_ptr, y_ptr, N, sxm, sxn, sym, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * sxm + offs * sxn, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, 0)
    m = tl.where(m == float("-inf"), 0.0, m)
    e = tl.exp(x - m)
    tl.store(y_ptr + row * sym + offs, (e / tl.sum(e, 0)).to(y_ptr.dtype.element_ty), mask=mask)


def _launch_lanewise(x: torch.Tensor, guard: bool, one_block_max: int) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return y
    if N <= one_block_max:
        _softmax_one_block[(M,)](x, y, N, x.stride(0), x.stride(1), y.stride(0), BLOCK=triton.next_power_of_2(N))
    else:
        _softmax_lanewise[(M,)](x, y, N, x.stride(0), x.stride(1), y.stride(0), TILE=TILE, GUARD=guard)
    return y


@softmax.implementation("good_softmax_exp2_triton", backend="triton")
def good_softmax_exp2_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch_exp2(x)


@softmax.implementation("good_softmax_online_triton", backend="triton")
def good_softmax_online_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch_lanewise(x, guard=True, one_block_max=0)


def _fast_exp(x: torch.Tensor) -> torch.Tensor:
    """e^x = 2^k * e^r with k = round(x / ln2), |r| <= ln2 / 2; degree-7 Taylor polynomial of e^r (float32)."""
    x = x.clamp(-103.0, 88.72)
    k = torch.floor(x * LOG2E + 0.5)
    r = x - k * 0.693145751953125 - k * 1.428606765330187e-06  # Cody-Waite split of ln2
    p = torch.full_like(r, 1.0 / 5040.0)
    for c in (1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0):
        p = p * r + c
    return torch.ldexp(p, k)


@softmax.implementation("good_softmax_fastexp_torch", backend="torch")
def good_softmax_fastexp_torch(x: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    m = xf.amax(dim=-1, keepdim=True) if xf.shape[-1] else xf.sum(dim=-1, keepdim=True)
    m = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    e = _fast_exp(xf - m)
    e = torch.where(torch.isnan(xf - m), xf - m, e)  # NaN (and inf - inf) stays NaN
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


@softmax.implementation("bad_softmax_no_max_sub_triton", backend="triton")
def bad_softmax_no_max_sub_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch_exp2(x, sub_max=False)


@softmax.implementation("bad_softmax_pad_zero_triton", backend="triton")
def bad_softmax_pad_zero_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch_exp2(x, pad_neg_inf=False)


@softmax.implementation("bad_softmax_no_rescale_triton", backend="triton")
def bad_softmax_no_rescale_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch_exp2(x, rescale=False)


@softmax.implementation("bad_softmax_inf_nan_multitile_triton", backend="triton")
def bad_softmax_inf_nan_multitile_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch_lanewise(x, guard=False, one_block_max=ONE_BLOCK_MAX)


@triton.jit
def _softmax_wide(x_ptr, y_ptr, N, sxm, sxn, sym, BLOCK: tl.constexpr, ONE_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    x_row = x_ptr + row * sxm
    y_row = y_ptr + row * sym
    if ONE_BLOCK:
        mask = offs < N
        x = tl.load(x_row + offs * sxn, mask=mask, other=float("-inf")).to(tl.float32)
        m = tl.max(x, 0)
        m = tl.where(m == float("-inf"), 0.0, m)
        e = tl.exp(x - m)
        tl.store(y_row + offs, (e / tl.sum(e, 0)).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        m = float("-inf")
        s = 0.0
        for start in range(0, N, BLOCK):
            cols = start + offs
            x = tl.load(x_row + cols * sxn, mask=cols < N, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, 0))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            s = s * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe), 0)
            m = m_new
        m_safe = tl.where(m == float("-inf"), 0.0, m)
        full = (N // BLOCK) * BLOCK
        for start in range(0, full, BLOCK):  # BUG: the partial last tile is never stored
            cols = start + offs
            x = tl.load(x_row + cols * sxn).to(tl.float32)
            tl.store(y_row + cols, (tl.exp(x - m_safe) / s).to(y_ptr.dtype.element_ty))


@softmax.implementation("bad_softmax_wide_store_triton", backend="triton")
def bad_softmax_wide_store_triton(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return y
    block = min(triton.next_power_of_2(N), WIDE_CAP)
    _softmax_wide[(M,)](x, y, N, x.stride(0), x.stride(1), y.stride(0), BLOCK=block, ONE_BLOCK=N <= block,
                        num_warps=16 if block >= 8192 else 4)
    return y
