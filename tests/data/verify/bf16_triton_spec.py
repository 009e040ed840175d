"""bfloat16 Triton kernels written the way production code is, computing in bfloat16 where the source does.

Each kernel is correct; on a GPU compiled Triton computes its bfloat16 arithmetic with bfloat16
instructions (or float32 rounded back), and on a CPU Triton's interpreter must give the same answer.
They are called with float32 tensors too (tests/verify/test_verify_triton_bf16.py): the same kernel,
computed in float32 and rounded to bfloat16 once, is the yardstick for the bfloat16 run.

- bf16_maximum: `tl.maximum` of two bfloat16 tiles, and a ReLU (`tl.maximum(x, 0.0)`) of the first,
  NaN-propagating like torch.
- bf16_rotary: rotary position embedding (the rotate-half form of HF Llama's apply_rotary_pos_emb), every
  product and sum in bfloat16.
- bf16_row_sum: `tl.sum` over a bfloat16 row tile (no upcast: the reduction runs in the input dtype).
- bf16_affine: `x * w + b` in bfloat16, w and b broadcast over rows (a bias-and-scale epilogue).
- bf16_dot: one `tl.dot` tile of bfloat16 operands with a float32 accumulator, stored as bfloat16.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

ROWS = [16, 5]
COLS = [64, 33]


# ---------------------------------------------------------------- maximum / ReLU

bf16_maximum = opgate.Operator(
    "bf16_maximum",
    reference=lambda x, y: torch.stack([torch.maximum(x, y), torch.relu(x)]),
    inputs=[opgate.TensorSpec("x", ("M", "N")), opgate.TensorSpec("y", ("M", "N"))],
    dims={"M": ROWS, "N": COLS},
    dtypes=["bfloat16", "float32"],
)


@triton.jit
def _maximum_kernel(x_ptr, y_ptr, out_ptr, M, N, sxm, sxn, sym, syn, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * sxm + cols * sxn, mask=mask)
    y = tl.load(y_ptr + row * sym + cols * syn, mask=mask)
    # NaN propagates as in torch.maximum / torch.relu (tl.maximum's default would return the other operand)
    tl.store(out_ptr + row * N + cols, tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL), mask=mask)
    tl.store(out_ptr + M * N + row * N + cols, tl.maximum(x, 0.0, propagate_nan=tl.PropagateNan.ALL), mask=mask)


@bf16_maximum.implementation("triton")
def maximum_triton(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    out = torch.empty((2, M, N), dtype=x.dtype, device=x.device)
    _maximum_kernel[(M,)](x, y, out, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                          BLOCK_N=triton.next_power_of_2(N))
    return out


# ---------------------------------------------------------------- rotary embedding

def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


bf16_rotary = opgate.Operator(
    "bf16_rotary",
    reference=lambda x, cos, sin: x * cos + _rotate_half(x) * sin,
    inputs=[opgate.TensorSpec("x", ("T", "D")),
            opgate.TensorSpec("cos", ("T", "D"), kind="uniform", low=-1.0, high=1.0),
            opgate.TensorSpec("sin", ("T", "D"), kind="uniform", low=-1.0, high=1.0)],
    dims={"T": [16, 7], "D": [64, 128]},
    exact_dims=["D"],  # the head dim: the kernel splits it in two halves
    dtypes=["bfloat16", "float32"],
)


@triton.jit
def _rotary_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, sx, sxd, sc, scd, ss, ssd, HALF: tl.constexpr):
    t = tl.program_id(0)
    d = tl.arange(0, HALF)
    x1 = tl.load(x_ptr + t * sx + d * sxd)
    x2 = tl.load(x_ptr + t * sx + (d + HALF) * sxd)
    cos1 = tl.load(cos_ptr + t * sc + d * scd)
    cos2 = tl.load(cos_ptr + t * sc + (d + HALF) * scd)
    sin1 = tl.load(sin_ptr + t * ss + d * ssd)
    sin2 = tl.load(sin_ptr + t * ss + (d + HALF) * ssd)
    tl.store(out_ptr + t * 2 * HALF + d, x1 * cos1 - x2 * sin1)
    tl.store(out_ptr + t * 2 * HALF + HALF + d, x2 * cos2 + x1 * sin2)


@bf16_rotary.implementation("triton")
def rotary_triton(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    T, D = x.shape
    out = torch.empty((T, D), dtype=x.dtype, device=x.device)
    _rotary_kernel[(T,)](x, cos, sin, out, x.stride(0), x.stride(1), cos.stride(0), cos.stride(1),
                         sin.stride(0), sin.stride(1), HALF=D // 2)
    return out


# ---------------------------------------------------------------- row sum

bf16_row_sum = opgate.Operator(
    "bf16_row_sum",
    reference=lambda x: x.sum(dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="positive")],
    dims={"M": ROWS, "N": COLS},
    dtypes=["bfloat16", "float32"],
)


@triton.jit
def _row_sum_kernel(x_ptr, out_ptr, M, N, sxm, sxn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tile = tl.load(x_ptr + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask, other=0.0)
    tl.store(out_ptr + rows, tl.sum(tile, axis=1), mask=rows < M)


@bf16_row_sum.implementation("triton")
def row_sum_triton(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    block_m = 4
    _row_sum_kernel[(triton.cdiv(M, block_m),)](x, out, M, N, x.stride(0), x.stride(1), BLOCK_M=block_m,
                                                BLOCK_N=triton.next_power_of_2(N))
    return out


# ---------------------------------------------------------------- x * w + b

bf16_affine = opgate.Operator(
    "bf16_affine",
    reference=lambda x, w, b: x * w + b,
    inputs=[opgate.TensorSpec("x", ("M", "N")), opgate.TensorSpec("w", ("N",)), opgate.TensorSpec("b", ("N",))],
    dims={"M": ROWS, "N": COLS},
    dtypes=["bfloat16", "float32"],
)


@triton.jit
def _affine_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N, sxm, sxn, swn, sbn, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * sxm + cols * sxn, mask=mask)
    w = tl.load(w_ptr + cols * swn, mask=mask)
    b = tl.load(b_ptr + cols * sbn, mask=mask)
    tl.store(out_ptr + row * N + cols, x * w + b, mask=mask)


@bf16_affine.implementation("triton")
def affine_triton(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _affine_kernel[(M,)](x, w, b, out, N, x.stride(0), x.stride(1), w.stride(0), b.stride(0),
                         BLOCK_N=triton.next_power_of_2(N))
    return out


# ---------------------------------------------------------------- one tl.dot tile

bf16_dot = opgate.Operator(
    "bf16_dot",
    reference=lambda a, b: a @ b,
    inputs=[opgate.TensorSpec("a", ("M", "K")), opgate.TensorSpec("b", ("K", "N"))],
    dims={"M": [32, 17], "N": [32, 9], "K": [64, 40]},
    # one tile's arithmetic is what this op exercises: N and K stay at their declared sizes (M is fuzzed), so
    # the interpreter does not run thousands of tile programs at the block-cap sizes opgate adds
    exact_dims=["N", "K"],
    dtypes=["bfloat16", "float32"],
)


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, BM: tl.constexpr, BN: tl.constexpr,
                BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * sam + (k0 + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@bf16_dot.implementation("triton")
def dot_triton(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    block = 32
    _dot_kernel[(triton.cdiv(M, block), triton.cdiv(N, block))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), BM=block, BN=block, BK=32)
    return c
