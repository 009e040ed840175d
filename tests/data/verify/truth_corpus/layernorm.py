"""Truth corpus: LayerNorm over the last dim, y = (x - mean) / sqrt(var + eps) * w + b.

x is kind "normal" (promises |x| <= 1e4 by default). Every correct float32 layer norm overflows somewhere far above
that: the centred square (x - mean)^2 leaves float32 at |x - mean| ~ 1.8e19, as PyTorch's CUDA kernel and
torch.compile's do. That is a range limit, not a bug.

Correct
- good_ln_twopass_triton: mean, then the variance of the centred values (tiles of at most 512, padding re-masked),
  then normalise; float32 throughout.
- good_ln_welford_triton: one statistics pass with Chan's parallel combination of per-tile (count, mean, M2),
  Welford style, as apex and PyTorch's CUDA layer norm do.
- good_ln_torch: torch.var_mean in float32 and rsqrt.

Buggy
- bad_ln_padded_divisor_triton: divides both sums by the padded tile width (next power of two) instead of N: right
  when N is a power of two <= 512, wrong at any other size.
- bad_ln_stride_triton: addresses x as if it were contiguous (row stride N, column stride 1): right on contiguous
  inputs, wrong on transposed or sliced views.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import opgate

EPS = 1e-5

layernorm = opgate.Operator(
    "layernorm",
    reference=lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), kind="normal"),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5),
        opgate.TensorSpec("b", ("N",), kind="normal"),
        opgate.Scalar("eps", EPS),
    ],
    dims={"M": [4, 3], "N": [512, 256]},
    dtypes=["float32"],
    flops=lambda M, N: 8 * M * N,
)

MAX_TILE = 512


@triton.jit
def _ln_twopass(x_ptr, w_ptr, b_ptr, y_ptr, N, eps, sxm, sxn, sw, sb, sym, TILE: tl.constexpr,
                PADDED_DIVISOR: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, TILE)
    x_row = x_ptr + row * sxm
    if PADDED_DIVISOR:
        n_div = tl.cdiv(N, TILE) * TILE
    else:
        n_div = N
    acc = tl.zeros([TILE], dtype=tl.float32)
    for start in range(0, N, TILE):
        cols = start + offs
        acc += tl.load(x_row + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, 0) / n_div
    acc = tl.zeros([TILE], dtype=tl.float32)
    for start in range(0, N, TILE):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols * sxn, mask=mask, other=0.0).to(tl.float32)
        xc = tl.where(mask, x - mean, 0.0)
        acc += xc * xc
    rstd = 1.0 / tl.sqrt(tl.sum(acc, 0) / n_div + eps)
    for start in range(0, N, TILE):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols * sxn, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols * sw, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols * sb, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * sym + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _ln_welford(x_ptr, w_ptr, b_ptr, y_ptr, N, eps, sxm, sxn, sw, sb, sym, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, TILE)
    x_row = x_ptr + row * sxm
    count = 0.0
    mean = 0.0
    m2 = 0.0
    for start in range(0, N, TILE):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols * sxn, mask=mask, other=0.0).to(tl.float32)
        n_b = tl.sum(mask.to(tl.float32), 0)
        mean_b = tl.sum(x, 0) / n_b
        xc = tl.where(mask, x - mean_b, 0.0)
        m2_b = tl.sum(xc * xc, 0)
        n_ab = count + n_b
        delta = mean_b - mean
        mean = mean + delta * (n_b / n_ab)
        m2 = m2 + m2_b + delta * delta * (count * n_b / n_ab)
        count = n_ab
    rstd = 1.0 / tl.sqrt(m2 / count + eps)
    for start in range(0, N, TILE):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols * sxn, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols * sw, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols * sb, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * sym + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


def _launch(kernel, x, w, b, eps, assume_contiguous: bool = False, **flags) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return y
    tile = min(triton.next_power_of_2(N), MAX_TILE)
    sxm, sxn = (N, 1) if assume_contiguous else (x.stride(0), x.stride(1))
    kernel[(M,)](x, w, b, y, N, eps, sxm, sxn, w.stride(0), b.stride(0), y.stride(0), TILE=tile, **flags)
    return y


@layernorm.implementation("good_ln_twopass_triton", backend="triton")
def good_ln_twopass_triton(x, w, b, eps):
    return _launch(_ln_twopass, x, w, b, eps, PADDED_DIVISOR=False)


@layernorm.implementation("good_ln_welford_triton", backend="triton")
def good_ln_welford_triton(x, w, b, eps):
    return _launch(_ln_welford, x, w, b, eps)


@layernorm.implementation("good_ln_torch", backend="torch")
def good_ln_torch(x, w, b, eps):
    xf = x.float()
    var, mean = torch.var_mean(xf, dim=-1, unbiased=False, keepdim=True)
    return ((xf - mean) * torch.rsqrt(var + eps) * w.float() + b.float()).to(x.dtype)


@layernorm.implementation("bad_ln_padded_divisor_triton", backend="triton")
def bad_ln_padded_divisor_triton(x, w, b, eps):
    return _launch(_ln_twopass, x, w, b, eps, PADDED_DIVISOR=True)


@layernorm.implementation("bad_ln_stride_triton", backend="triton")
def bad_ln_stride_triton(x, w, b, eps):
    return _launch(_ln_twopass, x, w, b, eps, assume_contiguous=True, PADDED_DIVISOR=False)
