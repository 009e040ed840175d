"""Spec whose kernels do NOT port everywhere: what `opgate analyze` must catch without a GPU.

- fp8_dot: an e4m3 tl.dot. Triton supports fp8e4nv only from sm_89: a compile error on sm_80.
- big_tile_matmul: 128x256x64 fp16 tiles, 4 pipeline stages, tuned for A100/H100: 144 KB of shared memory per
  block on sm_80 (fits 163 KB), 192 KB on sm_90 (fits 227 KB), but also 144 KB on sm_86/sm_89/sm_120, whose
  blocks get at most 99 KB: compiles, cannot launch there (resource overflow).
- needs_gpu: a launcher that allocates on "cuda": a capture error, whatever the target.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, 4):
        a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :] + k)
        b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :] + k)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


fp8_dot = opgate.Operator(
    "fp8_dot",
    reference=lambda a, b: a.float() @ b.float(),
    inputs=[opgate.TensorSpec("a", (64, 32)), opgate.TensorSpec("b", (32, 64))],
    dtypes=["float8_e4m3fn"],
    flops=lambda: 2 * 64 * 64 * 32,
)


@fp8_dot.implementation("triton")
def fp8_dot_triton(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = torch.empty((64, 64), dtype=torch.float32, device=a.device)
    _dot_kernel[(1,)](a, b, c, BM=64, BN=64, BK=32)
    return c


@triton.jit
def _pipelined_matmul(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * BN + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, K, BK):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
        a_ptrs += BK
        b_ptrs += BK * BN
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


big_tile_matmul = opgate.Operator(
    "big_tile_matmul",
    reference=lambda a, b: a @ b,
    inputs=[opgate.TensorSpec("a", (128, "K")), opgate.TensorSpec("b", ("K", 256))],
    dims={"K": [256]},
    dtypes=["float16"],
)


@big_tile_matmul.implementation("triton")
def big_tile_matmul_triton(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    c = torch.empty((128, 256), dtype=torch.float32, device=a.device)
    _pipelined_matmul[(1,)](a, b, c, a.shape[1], BM=128, BN=256, BK=64, num_warps=8, num_stages=4)
    return c


needs_gpu = opgate.Operator(
    "needs_gpu",
    reference=lambda x: x * 2,
    inputs=[opgate.TensorSpec("x", (128,))],
)


@needs_gpu.implementation("triton")
def needs_gpu_triton(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty((128,), dtype=x.dtype, device="cuda")
    _dot_kernel[(1,)](x, x, y, BM=16, BN=16, BK=16)
    return y
