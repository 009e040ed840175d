"""RMSNorm forward, y = x / sqrt(mean(x^2) + eps) * w, the way LLM kernel libraries ship it (blind8 corpus).

Implementations
- good_rmsnorm_rsqrt_triton (correct): one program per row, two passes in blocks of at most 1024 columns; the sum of
  squares is a float32 per-lane accumulator whatever the I/O dtype (what HF's LlamaRMSNorm, Liger-Kernel and vLLM do),
  the reciprocal is `tl.rsqrt` (rsqrt.approx on a GPU, ~2 ulp: fast-math that production code ships), padding lanes
  load 0 so they add nothing, and the mean divides by the true N.
- bad_rmsnorm_lowp_meansq_triton (buggy, precision): the sum of squares is kept in the I/O dtype (fp16/bf16): 128
  lanes, each squares and accumulates in the I/O dtype, and the mean is rounded to it. In fp16 x^2 overflows for
  |x| > 256 (pytorch/pytorch#133085, xlite-dev/LeetCUDA#335, nntrainer#3935: "accumulates the sum of squares in FP16");
  in bf16 a lane's accumulator loses low bits once it is much larger than one square. The I/O-dtype accumulator is
  written as a float32 value rounded to the I/O dtype after every operation, because the Triton interpreter's bf16
  arithmetic works on bit patterns; on a GPU a bf16/fp16 accumulator rounds the same way natively.
- bad_rmsnorm_eps_outside_triton (buggy, typical): y = x / (sqrt(mean(x^2)) + eps) * w, eps added outside the root
  (the confusion between the LayerNorm-style `std + eps` of some older code and the RMSNorm definition). With
  eps = 1e-5 the relative error is ~eps/2 = 5e-6 on unit-scale rows (~40 float32 ulp, systematic, every element) and
  grows to O(1) on rows whose mean square is comparable to eps. Invisible in fp16/bf16 at unit scale, wrong in fp32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import opgate

EPS = 1e-5

rmsnorm = opgate.Operator(
    "rmsnorm",
    reference=lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "N")),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5),
        opgate.Scalar("eps", EPS),
    ],
    dims={"M": [4, 7], "N": [64, 200]},
    dtypes=["float32", "float16", "bfloat16"],
)


@triton.jit
def _rmsnorm_fwd(x_ptr, w_ptr, y_ptr, N, eps, sxm, sxn, sw, sym, syn, BLOCK: tl.constexpr,
                 EPS_INSIDE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * sxm
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        x = tl.load(x_row + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    mean_sq = tl.sum(acc, axis=0) / N
    if EPS_INSIDE:
        rstd = tl.rsqrt(mean_sq + eps)
    else:
        rstd = 1.0 / (tl.sqrt(mean_sq) + eps)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols * sxn, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols * sw, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * sym + cols * syn, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_fwd_lowp(x_ptr, w_ptr, y_ptr, N, eps, sxm, sxn, sw, sym, syn, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    io = x_ptr.dtype.element_ty
    x_row = x_ptr + row * sxm
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)  # holds I/O-dtype values (rounded after every operation)
    for start in range(0, N, BLOCK):
        cols = start + offs
        x = tl.load(x_row + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)
        sq = (x * x).to(io).to(tl.float32)
        acc = (acc + sq).to(io).to(tl.float32)
    mean_sq = (tl.sum(acc, axis=0) / N).to(io).to(tl.float32)
    rstd = tl.rsqrt(mean_sq + eps)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols * sxn, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols * sw, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * sym + cols * syn, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def _launch(x: torch.Tensor, w: torch.Tensor, eps: float, eps_inside: bool) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return y
    block = min(triton.next_power_of_2(N), 1024)
    _rmsnorm_fwd[(M,)](x, w, y, N, eps, x.stride(0), x.stride(1), w.stride(0), y.stride(0), y.stride(1),
                       BLOCK=block, EPS_INSIDE=eps_inside)
    return y


@rmsnorm.implementation("good_rmsnorm_rsqrt_triton", backend="triton")
def good_rmsnorm_rsqrt_triton(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return _launch(x, w, eps, eps_inside=True)


@rmsnorm.implementation("bad_rmsnorm_eps_outside_triton", backend="triton")
def bad_rmsnorm_eps_outside_triton(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return _launch(x, w, eps, eps_inside=False)


@rmsnorm.implementation("bad_rmsnorm_lowp_meansq_triton", backend="triton")
def bad_rmsnorm_lowp_meansq_triton(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return y
    _rmsnorm_fwd_lowp[(M,)](x, w, y, N, eps, x.stride(0), x.stride(1), w.stride(0), y.stride(0), y.stride(1),
                            BLOCK=128)
    return y
