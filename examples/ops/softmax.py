"""Row softmax over the last dim of an (M, N) matrix.

Implementations
- triton: one program per row. When the row fits one block (N <= 4096) it is loaded once; longer rows take an
  online pass (running max and rescaled running sum) and a second normalising pass. Strided inputs are read
  through their strides, so transposed or sliced views need no copy.
- torch: the textbook max-subtracted formula, computed in float32 for half types.
- onnxruntime: softmax.onnx (Softmax-13, float32 only), written by make_onnx_models.py.

Non-finite inputs follow torch: a NaN or +inf in a row makes the whole row NaN, a row of -inf is NaN, and -inf
entries of an otherwise finite row get probability 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

softmax = opgate.Operator(
    "softmax",
    reference=lambda x: torch.softmax(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")],
    dims={"M": [64, 37], "N": [1024, 128, 1000, 4099]},
    perf_dims={"M": 16384, "N": 4096},  # the size the GPU runtime stage times and profiles
    dtypes=["float32", "float16", "bfloat16"],
    flops=lambda M, N: 5 * M * N,
    bytes=lambda M, N, itemsize: 2 * M * N * itemsize,
)
softmax.onnx_model("softmax.onnx")

MAX_BLOCK = 4096


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, N, stride_xm, stride_xn, stride_ym, BLOCK: tl.constexpr, ONE_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    offs = tl.arange(0, BLOCK)
    if ONE_BLOCK:
        mask = offs < N
        x = tl.load(x_row + offs * stride_xn, mask=mask, other=float("-inf")).to(tl.float32)
        m = tl.max(x, 0)
        # A row of -inf has max -inf; subtracting a finite stand-in keeps exp() at 0 and the result 0/0 = NaN, as torch.
        m = tl.where(m == float("-inf"), 0.0, m)
        e = tl.exp(x - m)
        tl.store(y_row + offs, (e / tl.sum(e, 0)).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        m = float("-inf")
        s = 0.0
        for start in range(0, N, BLOCK):
            cols = start + offs
            x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, 0))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            # Rescale the running sum to the new max before adding this block.
            s = s * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe), 0)
            m = m_new
        m_safe = tl.where(m == float("-inf"), 0.0, m)
        for start in range(0, N, BLOCK):
            cols = start + offs
            mask = cols < N
            x = tl.load(x_row + cols * stride_xn, mask=mask, other=float("-inf")).to(tl.float32)
            tl.store(y_row + cols, (tl.exp(x - m_safe) / s).to(y_ptr.dtype.element_ty), mask=mask)


@softmax.implementation("triton")
def softmax_triton(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    block = min(triton.next_power_of_2(N), MAX_BLOCK)
    _softmax_kernel[(M,)](
        x, y, N, x.stride(0), x.stride(1), y.stride(0),
        BLOCK=block, ONE_BLOCK=N <= block, num_warps=8 if block >= 2048 else 4,
    )
    return y


@softmax.implementation("torch")
def softmax_torch(x: torch.Tensor) -> torch.Tensor:
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    e = torch.exp(xf - xf.amax(dim=-1, keepdim=True))
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
