"""Corpus: RMSNorm. Two correct implementations and three buggy ones (see BUGS)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import opgate

rmsnorm = opgate.Operator(
    "rmsnorm",
    reference=lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "N")),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5),
        opgate.Scalar("eps", 1e-6),
    ],
    dims={"M": [8, 3], "N": [1024, 1000, 4096]},
    dtypes=["float32", "float16"],
)

BUGS = {
    "bad_rmsnorm_padded_mean": {"kind": "padded-size divisor", "exposed_by": {"dims": {"N": 1000}}},
    "bad_rmsnorm_half_accumulator": {
        "kind": "fp16 accumulation drift",
        "exposed_by": {"dims": {"N": 4096}, "dtype": "float16"},
    },
    "bad_rmsnorm_torch_half_squares": {
        "kind": "fp16 overflow (squares in input dtype)",
        "exposed_by": {"dtype": "float16", "scale": 1000.0},
    },
}


@triton.jit
def _rmsnorm(x_ptr, w_ptr, y_ptr, N, eps, sxm, sxn, sw, sym, BLOCK: tl.constexpr, DIVISOR_IS_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    sq = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * sxm + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)
        sq += x * x
    if DIVISOR_IS_BLOCK:
        mean_sq = tl.sum(sq, 0) / BLOCK
    else:
        mean_sq = tl.sum(sq, 0) / N
    rstd = 1.0 / tl.sqrt(mean_sq + eps)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * sxm + cols * sxn, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols * sw, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * sym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def _launch(x: torch.Tensor, w: torch.Tensor, eps: float, block: int, divisor_is_block: bool) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _rmsnorm[(M,)](
        x, w, y, N, eps, x.stride(0), x.stride(1), w.stride(0), y.stride(0),
        BLOCK=block, DIVISOR_IS_BLOCK=divisor_is_block,
    )
    return y


@rmsnorm.implementation("good_rmsnorm_triton", backend="triton")
def good_rmsnorm_triton(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Correct: float32 sum of squares in blocks of at most 1024, divided by N."""
    return _launch(x, w, eps, min(triton.next_power_of_2(x.shape[1]), 1024), divisor_is_block=False)


@rmsnorm.implementation("good_rmsnorm_torch", backend="torch")
def good_rmsnorm_torch(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Correct: the formula in float32."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


@rmsnorm.implementation("bad_rmsnorm_padded_mean", backend="triton")
def bad_rmsnorm_padded_mean(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Bug: the mean of squares divides by the padded block size (next power of two of N) instead of N.

    Exact when N is a power of two (the happy N=1024, also 4096); for N=1000 (declared) every output is scaled by
    sqrt(1000/1024), ~1.2% low; for N=257 by ~29%.
    """
    return _launch(x, w, eps, triton.next_power_of_2(x.shape[1]), divisor_is_block=True)


@triton.jit
def _rmsnorm_half_acc(
    x_ptr, w_ptr, y_ptr, M, N, eps, sxm, sxn, sw, sym,
    ROWS: tl.constexpr, PARTIAL: tl.constexpr, BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * sxm
    acc_ty = x_ptr.dtype.element_ty
    # The running sums live in the input dtype: every PARTIAL-wide partial sum is rounded into them.
    acc = tl.zeros([ROWS], dtype=acc_ty)
    for start in range(0, N, PARTIAL):
        cols = start + tl.arange(0, PARTIAL)
        x = tl.load(x_rows + cols[None, :] * sxn, mask=row_ok[:, None] & (cols[None, :] < N), other=0.0).to(tl.float32)
        acc = (acc.to(tl.float32) + tl.sum(x * x, 1)).to(acc_ty)
    rstd = 1.0 / tl.sqrt(acc.to(tl.float32) / N + eps)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = row_ok[:, None] & (cols[None, :] < N)
        x = tl.load(x_rows + cols[None, :] * sxn, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols * sw, mask=cols < N, other=0.0).to(tl.float32)
        y = x * rstd[:, None] * w[None, :]
        tl.store(y_ptr + rows.to(tl.int64)[:, None] * sym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@rmsnorm.implementation("bad_rmsnorm_half_accumulator", backend="triton")
def bad_rmsnorm_half_accumulator(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Bug: carries each row's running sum of squares in the input dtype, adding partial sums of 8 elements.

    Exact in float32 (the happy case). In float16 the sum of squares of a long row reaches thousands, where float16's
    spacing is 2-4, and every one of the N/8 partials is rounded into it: at N=4096 (declared) the outputs drift by
    ~0.1-0.3%, about 5x eager PyTorch's error (torch's rms_norm accumulates in float32 and rounds once).
    """
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _rmsnorm_half_acc[(triton.cdiv(M, 8),)](
        x, w, y, M, N, eps, x.stride(0), x.stride(1), w.stride(0), y.stride(0), ROWS=8, PARTIAL=8, BLOCK_N=1024
    )
    return y


@rmsnorm.implementation("bad_rmsnorm_torch_half_squares", backend="torch")
def bad_rmsnorm_torch_half_squares(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Bug: squares and averages in the input dtype (no float32 upcast, unlike torch's rms_norm).

    Exact in float32 and for small float16 values; in float16 x*x overflows to inf once |x| > 256 (large-magnitude
    inputs, e.g. N(0, 1000)), so rsqrt(inf) = 0 zeroes the whole row.
    """
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
