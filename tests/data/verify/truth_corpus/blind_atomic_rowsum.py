"""Row sum as a split reduction: many programs per row, each adding its chunk's partial sum with tl.atomic_add
(the split-K / split-N pattern of FlashAttention's dq accumulation, fla's chunked reductions and Triton's
split-K matmul tutorial; blind8 corpus).

- good_rowsum_split_atomic_triton (correct): grid (M, cdiv(N, 128)); each program sums its 128 columns in float32
  and atomically adds the partial into a zeroed float32 buffer; the result is cast to the I/O dtype once. The order
  of the atomic adds is nondeterministic (run-to-run bitwise differences of a few float32 ulp), which is fine: it is
  as accurate as any float32 summation order.
- bad_rowsum_split_atomic_lowp_triton (buggy, precision): the same grid, but the partials are atomically added
  straight into the output tensor in its I/O dtype (fp16 atomics exist on sm_70+), so the running sum is rounded to
  fp16 after every chunk: N / 128 roundings of a growing sum instead of one. The "atomicAdd on half accumulators"
  precision loss that made FlashAttention-2 keep dq_accum in float32, and PyTorch's index_add_/scatter_add_ on
  half tensors accumulate in the tensor's dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

rowsum = opgate.Operator(
    "rowsum_split",
    reference=lambda x: x.sum(dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [4, 7], "N": [64, 200, 1000]},
    dtypes=["float32", "float16"],
)

CHUNK = 128


@triton.jit
def _rowsum_split_kernel(x_ptr, acc_ptr, N, sxm, sxn, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row * sxm + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)
    partial = tl.sum(x, axis=0)
    tl.atomic_add(acc_ptr + row, partial.to(acc_ptr.dtype.element_ty))


def _launch(x: torch.Tensor, acc_dtype: torch.dtype) -> torch.Tensor:
    M, N = x.shape
    acc = torch.zeros((M,), dtype=acc_dtype, device=x.device)
    if M > 0 and N > 0:
        _rowsum_split_kernel[(M, triton.cdiv(N, CHUNK))](x, acc, N, x.stride(0), x.stride(1), CHUNK=CHUNK)
    return acc.to(x.dtype)


@rowsum.implementation("good_rowsum_split_atomic_triton", backend="triton")
def good_rowsum_split_atomic_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch(x, torch.float32)


@rowsum.implementation("bad_rowsum_split_atomic_lowp_triton", backend="triton")
def bad_rowsum_split_atomic_lowp_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch(x, x.dtype)
