"""Corpus: GELU (erf form). Two correct implementations and three buggy ones (see BUGS)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import opgate

gelu = opgate.Operator(
    "gelu",
    reference=lambda x: F.gelu(x),
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [4, 3], "N": [1024, 1000]},
    dtypes=["float32", "float16"],
)

BUGS = {
    "bad_gelu_grid_floor": {"kind": "tail mask", "exposed_by": {"dims": {"N": 1000}}},
    "bad_gelu_nan_to_zero": {"kind": "swallowed NaN", "exposed_by": {"nan": True}},
    "bad_gelu_torch_nan_to_num": {"kind": "swallowed NaN", "exposed_by": {"nan": True}},
}

BLOCK = 1024


@triton.jit
def _gelu(x_ptr, y_ptr, numel, N, sxm, sxn, BLOCK: tl.constexpr, ZERO_NAN: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    x = tl.load(x_ptr + (offs // N) * sxm + (offs % N) * sxn, mask=mask, other=0.0).to(tl.float32)
    if ZERO_NAN:
        x = tl.where(x != x, 0.0, x)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@gelu.implementation("good_gelu_triton", backend="triton")
def good_gelu_triton(x: torch.Tensor) -> torch.Tensor:
    """Correct: cdiv(numel, BLOCK) programs, last block masked, strides honoured."""
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _gelu[(triton.cdiv(M * N, BLOCK),)](x, y, M * N, N, x.stride(0), x.stride(1), BLOCK=BLOCK, ZERO_NAN=False)
    return y


@gelu.implementation("good_gelu_torch", backend="torch")
def good_gelu_torch(x: torch.Tensor) -> torch.Tensor:
    """Correct: the erf formula in float32."""
    xf = x.float()
    return (0.5 * xf * (1.0 + torch.erf(xf * 0.7071067811865476))).to(x.dtype)


@gelu.implementation("bad_gelu_grid_floor", backend="triton")
def bad_gelu_grid_floor(x: torch.Tensor) -> torch.Tensor:
    """Bug: launches numel // BLOCK programs instead of cdiv(numel, BLOCK): the last, partial block is never computed
    and keeps the zeros the output was allocated with.

    Exact when M*N is a multiple of 1024 (the happy 4 x 1024); for N=1000 (declared: 4000 elements) the last 928
    outputs are 0; any M*N below 1024 leaves the whole output 0.
    """
    M, N = x.shape
    y = torch.zeros((M, N), dtype=x.dtype, device=x.device)
    if (M * N) // BLOCK > 0:
        _gelu[((M * N) // BLOCK,)](x, y, M * N, N, x.stride(0), x.stride(1), BLOCK=BLOCK, ZERO_NAN=False)
    return y


@gelu.implementation("bad_gelu_nan_to_zero", backend="triton")
def bad_gelu_nan_to_zero(x: torch.Tensor) -> torch.Tensor:
    """Bug: "sanitises" inputs with where(x != x, 0, x), so a NaN input gives GELU(0) = 0 instead of NaN.

    Exact on every finite input; wrong only when NaN is injected (the spec keeps propagates_nonfinite=True).
    """
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _gelu[(triton.cdiv(M * N, BLOCK),)](x, y, M * N, N, x.stride(0), x.stride(1), BLOCK=BLOCK, ZERO_NAN=True)
    return y


@gelu.implementation("bad_gelu_torch_nan_to_num", backend="torch")
def bad_gelu_torch_nan_to_num(x: torch.Tensor) -> torch.Tensor:
    """Bug: F.gelu(torch.nan_to_num(x)): NaN becomes 0 (and +-inf the largest finite value).

    Exact on every finite input; wrong when NaN or inf is injected.
    """
    return F.gelu(torch.nan_to_num(x))
