"""Example spec for `opgate analyze` tests: a Triton vector add and a row softmax.

Each `triton` implementation is the launcher production code calls; `opgate analyze` runs it on CPU tensors
with a compile-only Triton driver, so every kernel specialization it launches is compiled for every target.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

vector_add = opgate.Operator(
    "vector_add",
    reference=lambda x, y: x + y,
    inputs=[opgate.TensorSpec("x", ("N",)), opgate.TensorSpec("y", ("N",))],
    dims={"N": [4096, 1000]},
    dtypes=["float32", "float16"],
    flops=lambda N: N,
    # no `bytes=`: opgate counts each input read once and the output written once
)


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@vector_add.implementation("triton")
def vector_add_triton(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    _add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out


softmax = opgate.Operator(
    "softmax",
    reference=lambda x: torch.softmax(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")],
    dims={"M": [64], "N": [1024, 4096]},
    dtypes=["float32", "float16"],
    # no `flops=`: opgate asks torch.utils.flop_counter, which counts no FLOPs for softmax (see the report)
    bytes=lambda M, N, itemsize: 2 * M * N * itemsize,
)


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < N
    x = tl.load(x_ptr + row * stride + offsets, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, 0))
    tl.store(y_ptr + row * stride + offsets, (e / tl.sum(e, 0)).to(y_ptr.dtype.element_ty), mask=mask)


@softmax.implementation("triton")
def softmax_triton(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(N)
    _softmax_kernel[(M,)](x, y, N, x.stride(0), BLOCK=block, num_warps=8 if block >= 2048 else 4)
    return y
