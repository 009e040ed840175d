"""Corpus: matmul. Two correct implementations and three buggy ones (see BUGS).

Inputs are uniform in [0, 1] (non-negative activations and weights, like attention probabilities times values):
sums then grow with K, which is where a half-precision accumulator loses digits.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

matmul = opgate.Operator(
    "matmul",
    reference=lambda a, b: a @ b,
    inputs=[
        opgate.TensorSpec("a", ("M", "K"), kind="uniform", low=0.0, high=1.0),
        opgate.TensorSpec("b", ("K", "N"), kind="uniform", low=0.0, high=1.0),
    ],
    dims={"M": [32, 17], "N": [32, 20], "K": [64, 100, 2048]},
    dtypes=["float32", "float16"],
)

BUGS = {
    "bad_matmul_k_tail_dropped": {"kind": "K tail dropped", "exposed_by": {"dims": {"K": 100}}},
    "bad_matmul_assumes_contiguous_b": {"kind": "assumes contiguous", "exposed_by": {"noncontiguous": ["b"]}},
    "bad_matmul_half_accumulator": {
        "kind": "fp16 accumulation drift",
        "exposed_by": {"dims": {"K": 2048}, "dtype": "float16"},
    },
}

BM = BN = BK = 32


@triton.jit
def _matmul(
    a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    DROP_K_TAIL: tl.constexpr, HALF_ACC: tl.constexpr, PRECISION: tl.constexpr,
):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    if HALF_ACC:
        acc = tl.zeros((BM, BN), dtype=c_ptr.dtype.element_ty)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    if DROP_K_TAIL:
        k_end = (K // BK) * BK
    else:
        k_end = K
    for k0 in range(0, k_end, BK):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        if HALF_ACC:
            acc += tl.dot(a, b, out_dtype=c_ptr.dtype.element_ty, input_precision=PRECISION)
        else:
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def _launch(a: torch.Tensor, b: torch.Tensor, b_strides: tuple[int, int] | None = None, drop_k_tail: bool = False, half_acc: bool = False) -> torch.Tensor:
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    sbk, sbn = b_strides if b_strides is not None else b.stride()
    _matmul[(triton.cdiv(M, BM), triton.cdiv(N, BN))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), sbk, sbn, c.stride(0), c.stride(1),
        BM=BM, BN=BN, BK=BK, DROP_K_TAIL=drop_k_tail, HALF_ACC=half_acc and a.dtype != torch.float32,
        PRECISION="ieee" if a.dtype == torch.float32 else "tf32",
    )
    return c


@matmul.implementation("good_matmul_triton", backend="triton")
def good_matmul_triton(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Correct: 32^3 tiles, float32 accumulator, every K step masked, strides honoured."""
    return _launch(a, b)


@matmul.implementation("good_matmul_torch", backend="torch")
def good_matmul_torch(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Correct: torch.matmul in float32."""
    return (a.float() @ b.float()).to(a.dtype)


@matmul.implementation("bad_matmul_k_tail_dropped", backend="triton")
def bad_matmul_k_tail_dropped(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Bug: the K loop runs K // 32 full steps and drops the K % 32 remainder.

    Exact when K is a multiple of 32 (the happy K=64, also 2048); for K=100 (declared) the last 4 products of every
    dot are missing (~4% low with these inputs); for K < 32 the output is all zeros.
    """
    return _launch(a, b, drop_k_tail=True)


@matmul.implementation("bad_matmul_assumes_contiguous_b", backend="triton")
def bad_matmul_assumes_contiguous_b(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Bug: indexes B as row-major (strides (N, 1)) whatever its real strides.

    Exact on contiguous B of every shape; wrong when B is a transposed view (e.g. a weight stored as (N, K) and
    passed as w.t()), which the spec allows.
    """
    return _launch(a, b, b_strides=(b.shape[1], 1))


@matmul.implementation("bad_matmul_half_accumulator", backend="triton")
def bad_matmul_half_accumulator(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Bug: accumulates in the output dtype (tl.dot(..., out_dtype=float16) added into a float16 accumulator).

    Exact in float32 (the happy case). In float16 with K=2048 (declared) the sums reach ~500, where float16's spacing
    is 0.25-0.5, and 64 partial sums are each rounded into it: errors many times eager PyTorch's, which accumulates in
    float32 and rounds once.
    """
    return _launch(a, b, half_acc=True)
