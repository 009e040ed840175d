"""Matrix multiply C = A @ B, A (M, K), B (K, N), with K tails: K need not be a multiple of the K block (32).

Implementations
- triton: a tiled kernel (64 x 64 output tiles, K in steps of 32) with a float32 accumulator. Every K step is
  masked, so the last, partial step reads zeros past K instead of the next row. A and B are read through their
  strides (transposed operands work). float32 inputs use input_precision="ieee" (torch's default float32 matmul
  does not use TF32, and neither does the reference this is judged against).
- torch: torch.matmul on float32 copies of half inputs (how one runs half matmuls on a CPU without half BLAS).
- onnxruntime: matmul.onnx (MatMul-13, float32 only), written by make_onnx_models.py.

Triton interpreter note: the interpreter keeps bfloat16 as raw uint16 and its tl.dot multiplies those bit
patterns (triton-lang/triton#11584, closed as "not supported yet"). When the kernel is interpreted, bfloat16 tiles
are widened to float32 before tl.dot; the products of two bfloat16 values are exact in float32, so this computes
what the GPU's bfloat16 MMA with a float32 accumulator computes, up to summation order.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

matmul = opgate.Operator(
    "matmul",
    reference=lambda a, b: a @ b,
    inputs=[opgate.TensorSpec("a", ("M", "K")), opgate.TensorSpec("b", ("K", "N"))],
    dims={"M": [128, 33], "N": [128, 65], "K": [128, 100, 257]},
    perf_dims={"M": 4096, "N": 4096, "K": 4096},  # the size the GPU runtime stage times and profiles
    dtypes=["float32", "float16", "bfloat16"],
    flops=lambda M, N, K: 2 * M * N * K,
    bytes=lambda M, N, K, itemsize: (M * K + K * N + M * N) * itemsize,
)
matmul.onnx_model("matmul.onnx")

BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 32


@triton.jit
def _matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    WIDEN: tl.constexpr, PRECISION: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(
            a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
            mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0,
        )
        b = tl.load(
            b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
            mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0,
        )
        if WIDEN:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    tl.store(
        c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
        acc.to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


def _interpreted(kernel: object) -> bool:
    return type(kernel).__name__ == "InterpretedFunction"


@matmul.implementation("triton")
def matmul_triton(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    widen = a.dtype == torch.bfloat16 and _interpreted(_matmul_kernel)
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    _matmul_kernel[grid](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, WIDEN=widen,
        PRECISION="ieee" if (a.dtype == torch.float32 or widen) else "tf32",
    )
    return c


@matmul.implementation("torch")
def matmul_torch(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype in (torch.float16, torch.bfloat16):
        return torch.matmul(a.float(), b.float()).to(a.dtype)
    return torch.matmul(a, b)
