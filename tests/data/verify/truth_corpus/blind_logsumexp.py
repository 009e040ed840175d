"""Row logsumexp and log_softmax with lane-wise online max/sum in base 2 (flash-attention / Liger cross-entropy
style; blind8 corpus).

Operator logsumexp: reference torch.logsumexp(x, -1) (+inf in a row gives +inf, an all -inf row gives -inf).
- good_lse_online_triton (correct): each of TILE lanes keeps its own running max m and sum s of 2^(x log2 e - m)
  over the row's tiles; when the new max is +-inf the shift is 0 (the guard that avoids -inf - -inf and
  inf - inf), lanes are merged at the end the same way. Padding lanes load -inf and stay (m = -inf, s = 0).
- bad_lse_no_inf_guard_triton (buggy, nonfinite): the same without the guard: a lane whose running max is still
  -inf computes exp2(-inf - -inf) = NaN. That happens on every padding lane when N is not a multiple of the tile
  (so rows narrower than the tile come back NaN) and on any -inf logit (masked vocabulary) at the start of a lane.
  gabrieldemarmiesse/torch-mojo-backend#319 ("Threads that see no vector on rows shorter than threads*V ...
  collapsed with exp(-inf - -inf) = NaN"), tinygrad#17822, onnxruntime#28461.
- bad_lse_wide_rows_tail_triton (buggy, tail): rows up to 4096 columns take the single-tile path (right); wider rows
  take a second path of unmasked 1024-column tiles `for start in range(0, N - 1024, 1024)` and then one masked tail
  tile at (N // 1024) * 1024. The loop bound is off by one tile when N is a multiple of 1024: the last full tile is
  neither a "full" tile nor the tail, and is dropped (N = 8192 is declared).

Operator log_softmax: reference torch.log_softmax(x, -1).
- good_log_softmax_triton (correct): the lane-wise online pass gives lse = m + log(s) (guard only for -inf, so a
  +inf logit gives a NaN row as torch does), then y = x - lse.
- bad_log_of_softmax_triton (buggy, range): log(softmax(x)) in two steps: p = 2^(x log2 e - m) / s underflows to 0
  for x - max < ~-103 (float32) and log(0) = -inf, where log_softmax is finite (x - lse); logits spread by more than
  ~100 are well inside the promised 1e4 (the reason torch ships log_softmax at all; the "use log_softmax, not
  log(softmax)" warnings in PyTorch's NLLLoss docs).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

logsumexp = opgate.Operator(
    "logsumexp",
    reference=lambda x: torch.logsumexp(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")],
    dims={"M": [4, 7], "N": [64, 200, 8192]},
    dtypes=["float32", "float16"],
)

log_softmax = opgate.Operator(
    "log_softmax",
    reference=lambda x: torch.log_softmax(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")],
    dims={"M": [4, 7], "N": [64, 200]},
    dtypes=["float32", "float16"],
)

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
MAX_TILE = 1024


@triton.jit
def _shift(m, GUARD: tl.constexpr, POS_INF_TOO: tl.constexpr):
    if GUARD:
        if POS_INF_TOO:
            return tl.where((m == float("-inf")) | (m == float("inf")), 0.0, m)
        else:
            return tl.where(m == float("-inf"), 0.0, m)
    else:
        return m


@triton.jit
def _row_lse2(x_row, N, sxn, TILE: tl.constexpr, GUARD: tl.constexpr, POS_INF_TOO: tl.constexpr):
    """log2(sum(2^(x log2 e))) of one row, lane-wise online."""
    offs = tl.arange(0, TILE)
    m = tl.full([TILE], float("-inf"), tl.float32)
    s = tl.zeros([TILE], dtype=tl.float32)
    for start in range(0, N, TILE):
        cols = start + offs
        x = tl.load(x_row + cols * sxn, mask=cols < N, other=float("-inf")).to(tl.float32) * 1.4426950408889634
        m_new = tl.maximum(m, x)
        sh = _shift(m_new, GUARD, POS_INF_TOO)
        s = s * tl.exp2(m - sh) + tl.exp2(x - sh)
        m = m_new
    m_row = tl.max(m, axis=0)
    sh_row = _shift(m_row, GUARD, POS_INF_TOO)
    total = tl.sum(s * tl.exp2(m - sh_row), axis=0)
    return sh_row + tl.log2(total)


@triton.jit
def _lse_kernel(x_ptr, y_ptr, N, sxm, sxn, TILE: tl.constexpr, GUARD: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    lse2 = _row_lse2(x_ptr + row * sxm, N, sxn, TILE, GUARD, True)
    tl.store(y_ptr + row, (lse2 * 0.6931471805599453).to(y_ptr.dtype.element_ty))


@triton.jit
def _lse_wide_kernel(x_ptr, y_ptr, N, sxm, sxn, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * sxm
    offs = tl.arange(0, TILE)
    m = tl.full([TILE], float("-inf"), tl.float32)
    s = tl.zeros([TILE], dtype=tl.float32)
    for start in range(0, N - TILE, TILE):  # "full tiles": off by one tile when N % TILE == 0
        x = tl.load(x_row + (start + offs) * sxn).to(tl.float32) * 1.4426950408889634
        m_new = tl.maximum(m, x)
        sh = tl.where((m_new == float("-inf")) | (m_new == float("inf")), 0.0, m_new)
        s = s * tl.exp2(m - sh) + tl.exp2(x - sh)
        m = m_new
    cols = (N // TILE) * TILE + offs  # the tail tile
    x = tl.load(x_row + cols * sxn, mask=cols < N, other=float("-inf")).to(tl.float32) * 1.4426950408889634
    m_new = tl.maximum(m, x)
    sh = tl.where((m_new == float("-inf")) | (m_new == float("inf")), 0.0, m_new)
    s = s * tl.exp2(m - sh) + tl.exp2(x - sh)
    m = m_new
    m_row = tl.max(m, axis=0)
    sh_row = tl.where((m_row == float("-inf")) | (m_row == float("inf")), 0.0, m_row)
    total = tl.sum(s * tl.exp2(m - sh_row), axis=0)
    tl.store(y_ptr + row, ((sh_row + tl.log2(total)) * 0.6931471805599453).to(y_ptr.dtype.element_ty))


@triton.jit
def _log_softmax_kernel(x_ptr, y_ptr, N, sxm, sxn, sym, TILE: tl.constexpr, TWO_STEP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * sxm
    offs = tl.arange(0, TILE)
    if TWO_STEP:  # m and s of the row, then log(2^(x log2 e - m) / s)
        m = tl.full([TILE], float("-inf"), tl.float32)
        s = tl.zeros([TILE], dtype=tl.float32)
        for start in range(0, N, TILE):
            cols = start + offs
            x = tl.load(x_row + cols * sxn, mask=cols < N, other=float("-inf")).to(tl.float32) * 1.4426950408889634
            m_new = tl.maximum(m, x)
            sh = tl.where(m_new == float("-inf"), 0.0, m_new)
            s = s * tl.exp2(m - sh) + tl.exp2(x - sh)
            m = m_new
        m_row = tl.max(m, axis=0)
        sh_row = tl.where(m_row == float("-inf"), 0.0, m_row)
        total = tl.sum(s * tl.exp2(m - sh_row), axis=0)
        for start in range(0, N, TILE):
            cols = start + offs
            mask = cols < N
            x = tl.load(x_row + cols * sxn, mask=mask, other=0.0).to(tl.float32) * 1.4426950408889634
            p = tl.exp2(x - sh_row) / total
            tl.store(y_ptr + row * sym + cols, tl.log(p).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        lse = _row_lse2(x_row, N, sxn, TILE, True, False) * 0.6931471805599453
        for start in range(0, N, TILE):
            cols = start + offs
            mask = cols < N
            x = tl.load(x_row + cols * sxn, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_ptr + row * sym + cols, (x - lse).to(y_ptr.dtype.element_ty), mask=mask)


def _lse(x: torch.Tensor, guard: bool) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return y
    tile = min(triton.next_power_of_2(max(N, 1)), MAX_TILE)
    _lse_kernel[(M,)](x, y, N, x.stride(0), x.stride(1), TILE=tile, GUARD=guard)
    return y


@logsumexp.implementation("good_lse_online_triton", backend="triton")
def good_lse_online_triton(x: torch.Tensor) -> torch.Tensor:
    return _lse(x, guard=True)


@logsumexp.implementation("bad_lse_no_inf_guard_triton", backend="triton")
def bad_lse_no_inf_guard_triton(x: torch.Tensor) -> torch.Tensor:
    return _lse(x, guard=False)


@logsumexp.implementation("bad_lse_wide_rows_tail_triton", backend="triton")
def bad_lse_wide_rows_tail_triton(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    if N <= 4096:
        return _lse(x, guard=True)
    y = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return y
    _lse_wide_kernel[(M,)](x, y, N, x.stride(0), x.stride(1), TILE=MAX_TILE)
    return y


def _log_softmax(x: torch.Tensor, two_step: bool) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return y
    tile = min(triton.next_power_of_2(N), MAX_TILE)
    _log_softmax_kernel[(M,)](x, y, N, x.stride(0), x.stride(1), y.stride(0), TILE=tile, TWO_STEP=two_step)
    return y


@log_softmax.implementation("good_log_softmax_triton", backend="triton")
def good_log_softmax_triton(x: torch.Tensor) -> torch.Tensor:
    return _log_softmax(x, two_step=False)


@log_softmax.implementation("bad_log_of_softmax_triton", backend="triton")
def bad_log_of_softmax_triton(x: torch.Tensor) -> torch.Tensor:
    return _log_softmax(x, two_step=True)
