"""RMSNorm for training: torch.autograd.Function with a Triton forward and a Triton backward (Liger-Kernel /
unsloth style; blind8 corpus). Gradients are checked for x and w.

Forward: one program per row, float32 sum of squares, rstd = rsqrt(mean(x^2) + eps) saved per row (float32),
y = x * rstd * w. Backward, with xhat = x * rstd and wg = w * dy:
    dx = rstd * (wg - xhat * mean(wg * xhat))          (the -x * rstd^3 * mean(w dy x) term written through xhat)
    dw = sum over rows of dy * xhat                      (per-row float32 partials summed over rows afterwards)

- good_rmsnorm_train_triton (correct): the formulas above.
- bad_rmsnorm_train_no_rstd3_triton (buggy, gradient): dx = rstd * w * dy, the derivative with rstd treated as a
  constant (the rstd^3 term through mean(x^2) is missing). The forward is right; only the gradient is wrong, by
  O(1) relative: the backward derived "by pattern" from y = x * s * w. (Liger-Kernel's and unsloth's RMSNorm
  backward keep this term; hand-ported kernels that drop it train but converge differently.)
- bad_rmsnorm_train_dw_no_rstd_triton (buggy, gradient): dw = sum dy * x (x instead of xhat: the normalisation is
  left out of the weight gradient). Off by the factor rstd per row, i.e. wrong whenever rows are not of unit RMS.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import opgate

EPS = 1e-6

rmsnorm_train = opgate.Operator(
    "rmsnorm_train",
    reference=lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.Scalar("eps", EPS),
    ],
    dims={"M": [4, 7], "N": [64, 200]},
    dtypes=["float32", "float16"],
)

MAX_BLOCK = 1024


@triton.jit
def _fwd_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, N, eps, sxm, sxn, sw, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * sxm
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        x = tl.load(x_row + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols * sxn, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols * sw, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * N + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _bwd_kernel(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dwp_ptr, N, sxm, sxn, sw, BLOCK: tl.constexpr,
                BUG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * sxm
    dy_row = dy_ptr + row * N
    offs = tl.arange(0, BLOCK)
    rstd = tl.load(rstd_ptr + row)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols * sxn, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols * sw, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(tl.float32)
        acc += (w * dy) * (x * rstd)
    c = tl.sum(acc, axis=0) / N
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols * sxn, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols * sw, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(tl.float32)
        xhat = x * rstd
        if BUG == 1:
            dx = rstd * (w * dy)
        else:
            dx = rstd * (w * dy - xhat * c)
        if BUG == 2:
            dwp = dy * x
        else:
            dwp = dy * xhat
        tl.store(dx_ptr + row * N + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        tl.store(dwp_ptr + row * N + cols, dwp, mask=mask)


class _RMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps, bug):
        M, N = x.shape
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
        rstd = torch.empty((M,), dtype=torch.float32, device=x.device)
        block = min(triton.next_power_of_2(max(N, 1)), MAX_BLOCK)
        if M > 0 and N > 0:
            _fwd_kernel[(M,)](x, w, y, rstd, N, eps, x.stride(0), x.stride(1), w.stride(0), BLOCK=block)
        ctx.save_for_backward(x, w, rstd)
        ctx.block, ctx.bug = block, bug
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, rstd = ctx.saved_tensors
        M, N = x.shape
        dy = dy.contiguous()
        dx = torch.empty((M, N), dtype=x.dtype, device=x.device)
        dw_partial = torch.zeros((M, N), dtype=torch.float32, device=x.device)
        if M > 0 and N > 0:
            _bwd_kernel[(M,)](dy, x, w, rstd, dx, dw_partial, N, x.stride(0), x.stride(1), w.stride(0),
                              BLOCK=ctx.block, BUG=ctx.bug)
        dw = dw_partial.sum(dim=0).to(w.dtype)
        return dx, dw, None, None


@rmsnorm_train.implementation("good_rmsnorm_train_triton", backend="triton")
def good_rmsnorm_train_triton(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return _RMSNormFn.apply(x, w, eps, 0)


@rmsnorm_train.implementation("bad_rmsnorm_train_no_rstd3_triton", backend="triton")
def bad_rmsnorm_train_no_rstd3_triton(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return _RMSNormFn.apply(x, w, eps, 1)


@rmsnorm_train.implementation("bad_rmsnorm_train_dw_no_rstd_triton", backend="triton")
def bad_rmsnorm_train_dw_no_rstd_triton(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return _RMSNormFn.apply(x, w, eps, 2)
