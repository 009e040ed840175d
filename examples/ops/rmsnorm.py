"""RMSNorm over the last dim: y = x / sqrt(mean(x^2) + eps) * w.

Implementations
- triton: one program per row, two passes over the row in blocks of at most 1024: a float32 sum of squares, then
  normalise and scale. Block padding is masked out of the sum and the mean divides by the true N.
- torch: the formula written out, in float32 for half types (what torch's own rms_norm does).
- onnxruntime: rmsnorm.onnx (RMSNormalization-23, float32 only, epsilon 1e-6 baked in), written by
  make_onnx_models.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import opgate

EPS = 1e-6

rmsnorm = opgate.Operator(
    "rmsnorm",
    reference=lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "N")),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5),
        opgate.Scalar("eps", EPS),
    ],
    dims={"M": [32, 7], "N": [1024, 4096, 1000, 77]},
    perf_dims={"M": 16384, "N": 4096},  # the size the GPU runtime stage times and profiles
    dtypes=["float32", "float16", "bfloat16"],
    flops=lambda M, N: 4 * M * N,
    bytes=lambda M, N, itemsize: (2 * M * N + N) * itemsize,
)
rmsnorm.onnx_model("rmsnorm.onnx")

MAX_BLOCK = 1024


@triton.jit
def _rmsnorm_kernel(
    x_ptr, w_ptr, y_ptr, N, eps, stride_xm, stride_xn, stride_w, stride_ym, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    offs = tl.arange(0, BLOCK)
    sq = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=0.0).to(tl.float32)
        sq += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(sq, 0) / N + eps)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols * stride_xn, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols * stride_w, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@rmsnorm.implementation("triton")
def rmsnorm_triton(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    block = min(triton.next_power_of_2(N), MAX_BLOCK)
    _rmsnorm_kernel[(M,)](x, w, y, N, eps, x.stride(0), x.stride(1), w.stride(0), y.stride(0), BLOCK=block)
    return y


@rmsnorm.implementation("torch")
def rmsnorm_torch(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (y * w.to(xf.dtype)).to(x.dtype)
