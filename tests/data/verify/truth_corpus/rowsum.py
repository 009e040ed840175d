"""Truth corpus: row sum over the last dim.

Correct
- good_rowsum_blockwise_triton: float32 accumulator vector over tiles of at most 512 columns, one tree sum at the
  end (how Triton reductions are written); float32 accumulation for float16 I/O.
- good_rowsum_sequential_torch: a plain sequential float32 sum (numpy's add.accumulate is strictly left to right),
  the order a naive CUDA loop or a CPU kernel without pairwise summation uses. On same-sign rows its error grows
  like (n-1)u of sum|x|: still a correct float32 implementation.

Buggy
- bad_rowsum_fp16_acc_triton: accumulates in the I/O dtype (float16 for float16 inputs): exact in float32, loses
  about log2(n) bits in float16 (accumulation precision).
- bad_rowsum_dropped_tail_triton: loops over whole tiles only, so the last N % 512 columns (all of them when N is
  below the tile) are never added.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

import opgate

rowsum = opgate.Operator(
    "rowsum",
    reference=lambda x: x.sum(dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="normal")],
    dims={"M": [4, 3], "N": [1024, 512]},
    dtypes=["float32", "float16"],
    flops=lambda M, N: M * N,
)

MAX_TILE = 512


@triton.jit
def _rowsum(x_ptr, y_ptr, N, sxm, sxn, TILE: tl.constexpr, ACC_IO: tl.constexpr, FULL_TILES_ONLY: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, TILE)
    if ACC_IO:
        acc = tl.zeros([TILE], dtype=y_ptr.dtype.element_ty)
    else:
        acc = tl.zeros([TILE], dtype=tl.float32)
    if FULL_TILES_ONLY:
        stop = (N // TILE) * TILE
    else:
        stop = N
    for start in range(0, stop, TILE):
        cols = start + offs
        x = tl.load(x_ptr + row * sxm + cols * sxn, mask=cols < N, other=0.0)
        if ACC_IO:
            acc += x
        else:
            acc += x.to(tl.float32)
    tl.store(y_ptr + row, tl.sum(acc, 0).to(y_ptr.dtype.element_ty))


def _launch(x: torch.Tensor, acc_io: bool = False, full_tiles_only: bool = False) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return y
    if N == 0:
        return y.zero_()
    tile = min(triton.next_power_of_2(N), MAX_TILE)
    _rowsum[(M,)](x, y, N, x.stride(0), x.stride(1), TILE=tile, ACC_IO=acc_io, FULL_TILES_ONLY=full_tiles_only)
    return y


@rowsum.implementation("good_rowsum_blockwise_triton", backend="triton")
def good_rowsum_blockwise_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch(x)


@rowsum.implementation("good_rowsum_sequential_torch", backend="torch")
def good_rowsum_sequential_torch(x: torch.Tensor) -> torch.Tensor:
    xs = x.detach().to("cpu", torch.float32).numpy()
    if xs.shape[-1] == 0:
        total = np.zeros(xs.shape[:-1], dtype=np.float32)
    else:
        total = np.add.accumulate(xs, axis=-1, dtype=np.float32)[..., -1]
    return torch.from_numpy(np.ascontiguousarray(total)).to(device=x.device, dtype=x.dtype)


@rowsum.implementation("bad_rowsum_fp16_acc_triton", backend="triton")
def bad_rowsum_fp16_acc_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch(x, acc_io=True)


@rowsum.implementation("bad_rowsum_dropped_tail_triton", backend="triton")
def bad_rowsum_dropped_tail_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch(x, full_tiles_only=True)
