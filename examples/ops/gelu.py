"""GELU, exact (erf) form: y = x / 2 * (1 + erf(x / sqrt(2))). Not the tanh approximation.

Implementations
- triton: a flat elementwise kernel over the (M, N) view, reading the input through its strides (so transposed
  and sliced views work) and writing a contiguous output; the last block is masked.
- torch: the erf formula written out, in float32 for half types.
- onnxruntime: gelu.onnx (Gelu-20, approximate="none", float32 only), written by make_onnx_models.py.

GELU(-inf) is NaN in torch (-inf * 0); the formula gives the same.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import opgate

gelu = opgate.Operator(
    "gelu",
    reference=lambda x: F.gelu(x),
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [64, 3], "N": [1024, 1000, 4097]},
    perf_dims={"M": 8192, "N": 8192},  # the size the GPU runtime stage times and profiles
    dtypes=["float32", "float16", "bfloat16"],
    flops=lambda M, N: 8 * M * N,
    bytes=lambda M, N, itemsize: 2 * M * N * itemsize,
)
gelu.onnx_model("gelu.onnx")

BLOCK = 1024
SQRT1_2 = 0.7071067811865476


@triton.jit
def _gelu_kernel(x_ptr, y_ptr, numel, N, stride_xm, stride_xn, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    row = offs // N
    col = offs % N
    x = tl.load(x_ptr + row * stride_xm + col * stride_xn, mask=mask, other=0.0).to(tl.float32)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@gelu.implementation("triton")
def gelu_triton(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _gelu_kernel[(triton.cdiv(M * N, BLOCK),)](x, y, M * N, N, x.stride(0), x.stride(1), BLOCK=BLOCK)
    return y


@gelu.implementation("torch")
def gelu_torch(x: torch.Tensor) -> torch.Tensor:
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return (0.5 * xf * (1.0 + torch.erf(xf * SQRT1_2))).to(x.dtype)
