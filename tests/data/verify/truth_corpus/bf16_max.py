"""Truth corpus: elementwise maximum of two bfloat16 tensors, as a bf16 Triton kernel (tl.maximum on bf16).

- good_maximum_bf16_triton: tl.maximum(a, b, propagate_nan=ALL) directly on the bfloat16 values: exact on a GPU
  (max needs no rounding). Triton's CPU interpreter compares bfloat16 as raw uint16 bit patterns, so every
  negative value compares wrong there: an interpreter limitation, not a kernel bug.
- bad_maximum_bf16_drops_nan_triton: the default propagate_nan=NONE (maxnum): drops a NaN torch.maximum keeps.
  Upcast to float32 first so the interpreter computes it right and only the NaN handling differs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

maximum_bf16 = opgate.Operator(
    "maximum_bf16",
    reference=lambda a, b: torch.maximum(a, b),
    inputs=[opgate.TensorSpec("a", ("M", "N")), opgate.TensorSpec("b", ("M", "N"))],
    dims={"M": [8, 3], "N": [256, 100]},
    dtypes=["bfloat16"],
)

BLOCK = 1024


@triton.jit
def _maximum(a_ptr, b_ptr, y_ptr, numel, N, sam, san, sbm, sbn, BLOCK: tl.constexpr, KEEP_NAN: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    r = offs // N
    c = offs % N
    a = tl.load(a_ptr + r * sam + c * san, mask=mask, other=0.0)
    b = tl.load(b_ptr + r * sbm + c * sbn, mask=mask, other=0.0)
    if KEEP_NAN:
        y = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    else:
        y = tl.maximum(a.to(tl.float32), b.to(tl.float32))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch(a, b, keep_nan: bool):
    M, N = a.shape
    y = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if M * N == 0:
        return y
    _maximum[(triton.cdiv(M * N, BLOCK),)](a, b, y, M * N, N, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                          BLOCK=BLOCK, KEEP_NAN=keep_nan)
    return y


@maximum_bf16.implementation("good_maximum_bf16_triton", backend="triton")
def good_maximum_bf16_triton(a, b):
    return _launch(a, b, keep_nan=True)


@maximum_bf16.implementation("bad_maximum_bf16_drops_nan_triton", backend="triton")
def bad_maximum_bf16_drops_nan_triton(a, b):
    return _launch(a, b, keep_nan=False)
