"""Corpus: ReLU. Two correct implementations and one buggy one (see BUGS)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

relu = opgate.Operator(
    "relu",
    reference=lambda x: torch.relu(x),
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [4, 3], "N": [1024, 1000]},
    dtypes=["float32", "float16"],
)

BUGS = {
    "bad_relu_maximum_drops_nan": {"kind": "swallowed NaN", "exposed_by": {"nan": True}},
}

BLOCK = 1024


@triton.jit
def _relu(x_ptr, y_ptr, numel, N, sxm, sxn, BLOCK: tl.constexpr, KEEP_NAN: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    x = tl.load(x_ptr + (offs // N) * sxm + (offs % N) * sxn, mask=mask, other=0.0)
    if KEEP_NAN:
        y = tl.maximum(x, 0.0, propagate_nan=tl.PropagateNan.ALL)
    else:
        y = tl.maximum(x, 0.0)  # default PropagateNan.NONE: max(NaN, 0) = 0
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch(x: torch.Tensor, keep_nan: bool) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _relu[(triton.cdiv(M * N, BLOCK),)](x, y, M * N, N, x.stride(0), x.stride(1), BLOCK=BLOCK, KEEP_NAN=keep_nan)
    return y


@relu.implementation("good_relu_triton", backend="triton")
def good_relu_triton(x: torch.Tensor) -> torch.Tensor:
    """Correct: tl.maximum(x, 0, propagate_nan=ALL) keeps NaN, as torch.relu does."""
    return _launch(x, keep_nan=True)


@relu.implementation("good_relu_torch", backend="torch")
def good_relu_torch(x: torch.Tensor) -> torch.Tensor:
    """Correct: torch.clamp_min(x, 0) (propagates NaN)."""
    return torch.clamp_min(x, 0)


@relu.implementation("bad_relu_maximum_drops_nan", backend="triton")
def bad_relu_maximum_drops_nan(x: torch.Tensor) -> torch.Tensor:
    """Bug: tl.maximum(x, 0.0) with the default propagate_nan=NONE lowers to maxnum, which returns 0 for a NaN input.

    Exact on every finite input; wrong only when NaN is injected (torch.relu(NaN) is NaN). The interpreter models
    maxnum with numpy.fmax, so it shows the same as a GPU.
    """
    return _launch(x, keep_nan=False)
