"""Embedding lookup y[m] = weight[idx[m]] (a gather with an index input; blind8 corpus).

idx is an index input in [0, V); the reference F.embedding raises on an index outside it, so behaviour there is
outside the contract.

- good_embedding_triton (correct): one program per (32 indices x 64 columns) tile; int64 index arithmetic, the table
  read through both its strides.
- good_embedding_clamp_triton (correct): the same with the index clamped to [0, V - 1] first (the "never fault"
  policy some serving kernels ship instead of a device assert). Identical on every index the contract allows, so it
  must pass; clamping silently is a design choice for invalid input, which the reference does not define.
- bad_embedding_shard_boundary_triton (buggy, typical): the table is used as two vocabulary shards, rows
  [0, V//2) and [V//2, V), each contributing its masked rows and the two summed (the vocab-parallel embedding of
  Megatron / vLLM, here on one device). Shard 1's range test is `idx > V//2` instead of `>=`, so the one index
  V//2 belongs to neither shard and comes out as a zero row (the off-by-one-at-the-shard-edge class of
  VocabParallelEmbedding fixes). Wrong for one valid index per table, right everywhere else.
- bad_embedding_row_stride_triton (buggy, layout): addresses the table as weight + idx * D + col, i.e. assumes a
  contiguous table (row stride D, column stride 1); wrong on a sliced or transposed weight view (the
  "Fix silently wrong ... for non-contiguous inputs" reports, e.g. ROCm/aiter#5292, rahul-goel/fused-ssim#44).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import opgate

embedding = opgate.Operator(
    "embedding",
    reference=lambda weight, idx: F.embedding(idx, weight),
    inputs=[
        opgate.TensorSpec("weight", ("V", "D")),
        opgate.TensorSpec("idx", ("M",), dtype="int64", kind="index", high="V"),
    ],
    dims={"V": [100, 37], "D": [64, 96], "M": [7, 33]},
    # V is exact: the opgate this corpus was labelled on stopped the whole file when it fuzzed V to 0 (no index value
    # exists there; fixed since: such sizes are no longer planned, tests/verify/test_verify_inputs.py). Kept exact so
    # the verdicts of the blind8 report stay comparable.
    exact_dims=["V"],
    dtypes=["float32", "float16"],
)

BLOCK_M = 32
BLOCK_D = 64


@triton.jit
def _embedding_kernel(w_ptr, idx_ptr, y_ptr, M, V, D, swv, swd, sidx, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                      MODE: tl.constexpr):
    ms = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mmask = ms < M
    tile = mmask[:, None] & (cols < D)[None, :]
    idx = tl.load(idx_ptr + ms * sidx, mask=mmask, other=0).to(tl.int64)
    if MODE == 1:  # clamp
        idx = tl.minimum(tl.maximum(idx, 0), V - 1)
    if MODE == 2:  # two shards, the second one's range test off by one
        half = V // 2
        in0 = (idx < half)[:, None]
        in1 = (idx > half)[:, None]
        r0 = tl.load(w_ptr + idx[:, None] * swv + cols[None, :] * swd, mask=tile & in0, other=0.0).to(tl.float32)
        r1 = tl.load(w_ptr + half * swv + (idx[:, None] - half) * swv + cols[None, :] * swd, mask=tile & in1,
                     other=0.0).to(tl.float32)
        rows = r0 + r1
    elif MODE == 3:  # contiguous-table assumption
        rows = tl.load(w_ptr + idx[:, None] * D + cols[None, :], mask=tile, other=0.0).to(tl.float32)
    else:
        rows = tl.load(w_ptr + idx[:, None] * swv + cols[None, :] * swd, mask=tile, other=0.0).to(tl.float32)
    tl.store(y_ptr + ms[:, None] * D + cols[None, :], rows.to(y_ptr.dtype.element_ty), mask=tile)


def _launch(weight: torch.Tensor, idx: torch.Tensor, mode: int) -> torch.Tensor:
    V, D = weight.shape
    (M,) = idx.shape
    y = torch.empty((M, D), dtype=weight.dtype, device=weight.device)
    if M == 0 or D == 0:
        return y
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(D, BLOCK_D))
    _embedding_kernel[grid](weight, idx, y, M, V, D, weight.stride(0), weight.stride(1), idx.stride(0),
                            BLOCK_M=BLOCK_M, BLOCK_D=BLOCK_D, MODE=mode)
    return y


@embedding.implementation("good_embedding_triton", backend="triton")
def good_embedding_triton(weight: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return _launch(weight, idx, 0)


@embedding.implementation("good_embedding_clamp_triton", backend="triton")
def good_embedding_clamp_triton(weight: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return _launch(weight, idx, 1)


@embedding.implementation("bad_embedding_shard_boundary_triton", backend="triton")
def bad_embedding_shard_boundary_triton(weight: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return _launch(weight, idx, 2)


@embedding.implementation("bad_embedding_row_stride_triton", backend="triton")
def bad_embedding_row_stride_triton(weight: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return _launch(weight, idx, 3)
