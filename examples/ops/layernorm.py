"""LayerNorm over the last dim with weight and bias: y = (x - mean) / sqrt(var + eps) * w + b.

Implementations
- triton: one program per row, three passes in blocks of at most 1024: mean, then the variance of the centred
  values (two-pass, so a large mean does not cancel the variance away), then normalise. The centred values of the
  block padding are masked to 0 before squaring, and both means divide by the true N.
- torch: the formula written out, in float32 for half types.
- onnxruntime: layernorm.onnx (LayerNormalization-17, float32 only, epsilon 1e-5 baked in), written by
  make_onnx_models.py.

x is drawn uniform in [-1, 3]: activations with a non-zero mean, which is where variance formulas go wrong.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import opgate

EPS = 1e-5

layernorm = opgate.Operator(
    "layernorm",
    reference=lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), kind="uniform", low=-1.0, high=3.0),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5),
        opgate.TensorSpec("b", ("N",), kind="normal"),
        opgate.Scalar("eps", EPS),
    ],
    dims={"M": [32, 7], "N": [1024, 4096, 1000, 77]},
    perf_dims={"M": 16384, "N": 4096},  # the size the GPU runtime stage times and profiles
    dtypes=["float32", "float16", "bfloat16"],
    flops=lambda M, N: 8 * M * N,
    bytes=lambda M, N, itemsize: (2 * M * N + 2 * N) * itemsize,
)
layernorm.onnx_model("layernorm.onnx")

MAX_BLOCK = 1024


@triton.jit
def _layernorm_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, N, eps, stride_xm, stride_xn, stride_w, stride_b, stride_ym, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        acc += tl.load(x_row + cols * stride_xn, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, 0) / N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols * stride_xn, mask=mask, other=0.0).to(tl.float32)
        xc = tl.where(mask, x - mean, 0.0)
        acc += xc * xc
    rstd = 1.0 / tl.sqrt(tl.sum(acc, 0) / N + eps)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols * stride_xn, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols * stride_w, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols * stride_b, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@layernorm.implementation("triton")
def layernorm_triton(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    block = min(triton.next_power_of_2(N), MAX_BLOCK)
    _layernorm_kernel[(M,)](
        x, w, b, y, N, eps, x.stride(0), x.stride(1), w.stride(0), b.stride(0), y.stride(0), BLOCK=block
    )
    return y


@layernorm.implementation("torch")
def layernorm_torch(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    mean = xf.mean(dim=-1, keepdim=True)
    var = (xf - mean).pow(2).mean(dim=-1, keepdim=True)
    y = (xf - mean) * torch.rsqrt(var + eps) * w.to(xf.dtype) + b.to(xf.dtype)
    return y.to(x.dtype)
