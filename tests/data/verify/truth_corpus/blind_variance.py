"""Row variance (population, correction = 0): the statistics pass of LayerNorm / GroupNorm / BatchNorm kernels
(blind8 corpus).

- good_var_chan_triton (correct): one pass over 1024-column tiles; each tile's mean and centred M2 are computed in
  registers (two-pass inside the tile), then merged into the running (count, mean, M2) with Chan et al.'s parallel
  update (delta = mean_b - mean_a; M2 += M2_b + delta^2 n_a n_b / n): the blockwise Welford that apex / fla layer
  norms use. float32 throughout.
- good_var_twopass_triton (correct): mean first, then the sum of squared deviations from it (float32).
- bad_var_naive_triton (buggy, precision): one pass of sum(x) and sum(x^2) in float32, var = E[x^2] - E[x]^2.
  Exact in real arithmetic, catastrophic cancellation in float32 when |mean| >> std: both terms ~ mean^2 and their
  difference loses log2(mean^2 / var) bits (negative variances, NaN after rsqrt).
  tenstorrent/tt-metal#45968 (batch_norm E[x^2] - E[x]^2 -> NaN at mean ~5, std 0.1), k2-fsa/sherpa-onnx#3857,
  google/flax#1491, tensorflow/tensorflow#3290, tensorflow#25115 ("a ratio of 1e4 can result in a relative
  error ..."). The input is kind "normal" (opgate's choice of rows); whether opgate ever feeds rows with a large
  common offset decides whether it can see this bug.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

row_var = opgate.Operator(
    "row_var",
    reference=lambda x: torch.var(x, dim=-1, correction=0),
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [4, 7], "N": [64, 200]},
    dtypes=["float32", "float16"],
)

MAX_TILE = 1024


@triton.jit
def _var_chan_kernel(x_ptr, y_ptr, N, sxm, sxn, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * sxm
    offs = tl.arange(0, TILE)
    count = 0.0
    mean = 0.0
    m2 = 0.0
    for start in range(0, N, TILE):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols * sxn, mask=mask, other=0.0).to(tl.float32)
        n_b = tl.minimum(N - start, TILE).to(tl.float32)
        mean_b = tl.sum(x, axis=0) / n_b
        d = tl.where(mask, x - mean_b, 0.0)
        m2_b = tl.sum(d * d, axis=0)
        n = count + n_b
        delta = mean_b - mean
        mean = mean + delta * (n_b / n)
        m2 = m2 + m2_b + delta * delta * (count * n_b / n)
        count = n
    tl.store(y_ptr + row, (m2 / count).to(y_ptr.dtype.element_ty))


@triton.jit
def _var_twopass_kernel(x_ptr, y_ptr, N, sxm, sxn, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * sxm
    offs = tl.arange(0, TILE)
    acc = tl.zeros([TILE], dtype=tl.float32)
    for start in range(0, N, TILE):
        cols = start + offs
        acc += tl.load(x_row + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc2 = tl.zeros([TILE], dtype=tl.float32)
    for start in range(0, N, TILE):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols * sxn, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - mean, 0.0)
        acc2 += d * d
    tl.store(y_ptr + row, (tl.sum(acc2, axis=0) / N).to(y_ptr.dtype.element_ty))


@triton.jit
def _var_naive_kernel(x_ptr, y_ptr, N, sxm, sxn, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * sxm
    offs = tl.arange(0, TILE)
    s1 = tl.zeros([TILE], dtype=tl.float32)
    s2 = tl.zeros([TILE], dtype=tl.float32)
    for start in range(0, N, TILE):
        cols = start + offs
        x = tl.load(x_row + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)
        s1 += x
        s2 += x * x
    mean = tl.sum(s1, axis=0) / N
    var = tl.sum(s2, axis=0) / N - mean * mean
    tl.store(y_ptr + row, var.to(y_ptr.dtype.element_ty))


def _launch(kernel, x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return y
    tile = min(triton.next_power_of_2(max(N, 1)), MAX_TILE)
    kernel[(M,)](x, y, N, x.stride(0), x.stride(1), TILE=tile)
    return y


@row_var.implementation("good_var_chan_triton", backend="triton")
def good_var_chan_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch(_var_chan_kernel, x)


@row_var.implementation("good_var_twopass_triton", backend="triton")
def good_var_twopass_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch(_var_twopass_kernel, x)


@row_var.implementation("bad_var_naive_triton", backend="triton")
def bad_var_naive_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch(_var_naive_kernel, x)
