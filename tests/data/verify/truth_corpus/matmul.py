"""Truth corpus: matmul a (M, K) @ b (K, N).

Correct
- good_matmul_splitk_triton: split-K (4 slices of K), each program writes a float32 partial tile, a second pass sums
  the partials (torch.sum over the split axis), as split-K GEMMs without atomics do.
- good_matmul_fp32acc_triton: classic tiled kernel, float32 accumulator for float16 inputs, every K step masked.

Buggy
- bad_matmul_dropped_ktail_triton: the K loop runs over whole 16-wide steps only and loads unmasked along K, so
  the last K % 16 products are dropped (right when K is a multiple of 16).
- bad_matmul_fp16acc_triton: accumulates tl.dot results in the I/O dtype (float16 for float16 inputs): one
  rounding to 11 bits per K step.
- bad_matmul_stride_triton: assumes b is row-major contiguous (stride_bk = N, stride_bn = 1).
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
    dims={"M": [32, 16], "K": [64, 128], "N": [32, 16]},
    dtypes=["float32", "float16"],
    flops=lambda M, K, N: 2 * M * K * N,
)

BM, BN, BK = 16, 16, 16
SPLIT_K = 4


@triton.jit
def _matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scs, scm, scn, k_per_split,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, IEEE: tl.constexpr,
            ACC_IO: tl.constexpr, FULL_K_ONLY: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    k_lo = pid_k * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    if FULL_K_ONLY:
        k_hi = k_lo + ((k_hi - k_lo) // BK) * BK
    if ACC_IO:
        acc = tl.zeros([BM, BN], dtype=c_ptr.dtype.element_ty)
    else:
        acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BK):
        ks = k0 + rk
        if FULL_K_ONLY:
            a = tl.load(a_ptr + rm[:, None] * sam + ks[None, :] * sak, mask=rm[:, None] < M, other=0.0)
            b = tl.load(b_ptr + ks[:, None] * sbk + rn[None, :] * sbn, mask=rn[None, :] < N, other=0.0)
        else:
            a = tl.load(a_ptr + rm[:, None] * sam + ks[None, :] * sak,
                        mask=(rm[:, None] < M) & (ks[None, :] < k_hi), other=0.0)
            b = tl.load(b_ptr + ks[:, None] * sbk + rn[None, :] * sbn,
                        mask=(ks[:, None] < k_hi) & (rn[None, :] < N), other=0.0)
        if IEEE:
            d = tl.dot(a, b, input_precision="ieee")
        else:
            d = tl.dot(a, b)
        if ACC_IO:
            acc += d.to(c_ptr.dtype.element_ty)
        else:
            acc += d
    c = c_ptr + pid_k * scs + rm[:, None] * scm + rn[None, :] * scn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def _launch(a: torch.Tensor, b: torch.Tensor, split_k: int = 1, acc_io: bool = False, full_k_only: bool = False,
            assume_b_contiguous: bool = False) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]
    if M == 0 or N == 0 or K == 0:
        return torch.zeros((M, N), dtype=a.dtype, device=a.device)
    k_per_split = triton.cdiv(triton.cdiv(K, split_k), BK) * BK
    splits = triton.cdiv(K, k_per_split)
    if splits > 1:
        c = torch.empty((splits, M, N), dtype=torch.float32, device=a.device)
    else:
        c = torch.empty((1, M, N), dtype=a.dtype, device=a.device)
    sbk, sbn = (N, 1) if assume_b_contiguous else (b.stride(0), b.stride(1))
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN), splits)
    _matmul[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), sbk, sbn, c.stride(0), c.stride(1), c.stride(2),
                  k_per_split, BM=BM, BN=BN, BK=BK, IEEE=a.dtype == torch.float32, ACC_IO=acc_io,
                  FULL_K_ONLY=full_k_only)
    if splits > 1:
        return c.sum(dim=0).to(a.dtype)  # the second pass over the float32 partials
    return c[0]


@matmul.implementation("good_matmul_splitk_triton", backend="triton")
def good_matmul_splitk_triton(a, b):
    return _launch(a, b, split_k=SPLIT_K)


@matmul.implementation("good_matmul_fp32acc_triton", backend="triton")
def good_matmul_fp32acc_triton(a, b):
    return _launch(a, b)


@matmul.implementation("bad_matmul_dropped_ktail_triton", backend="triton")
def bad_matmul_dropped_ktail_triton(a, b):
    return _launch(a, b, full_k_only=True)


@matmul.implementation("bad_matmul_fp16acc_triton", backend="triton")
def bad_matmul_fp16acc_triton(a, b):
    return _launch(a, b, acc_io=True)


@matmul.implementation("bad_matmul_stride_triton", backend="triton")
def bad_matmul_stride_triton(a, b):
    return _launch(a, b, assume_b_contiguous=True)
