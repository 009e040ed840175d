"""Corpus: LayerNorm. Two correct implementations and one buggy one (see BUGS)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import opgate

layernorm = opgate.Operator(
    "layernorm",
    reference=lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), kind="uniform", low=-1.0, high=3.0),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5),
        opgate.TensorSpec("b", ("N",)),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"M": [8, 3], "N": [1024, 1000]},
    dtypes=["float32", "float16"],
)

BUGS = {
    "bad_layernorm_unmasked_centring": {"kind": "tail mask", "exposed_by": {"dims": {"N": 1000}}},
}


@triton.jit
def _layernorm(x_ptr, w_ptr, b_ptr, y_ptr, N, eps, sxm, sxn, sw, sb, sym, BLOCK: tl.constexpr, MASK_CENTRED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * sxm + cols * sxn, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, 0) / N
    xc = x - mean
    if MASK_CENTRED:
        xc = tl.where(mask, xc, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, 0) / N + eps)
    w = tl.load(w_ptr + cols * sw, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols * sb, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * sym + cols, (xc * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


def _launch(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float, mask_centred: bool) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _layernorm[(M,)](
        x, w, b, y, N, eps, x.stride(0), x.stride(1), w.stride(0), b.stride(0), y.stride(0),
        BLOCK=triton.next_power_of_2(N), MASK_CENTRED=mask_centred,
    )
    return y


@layernorm.implementation("good_layernorm_triton", backend="triton")
def good_layernorm_triton(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    """Correct: one block per row; centred padding lanes are re-masked to 0 before squaring."""
    return _launch(x, w, b, eps, mask_centred=True)


@layernorm.implementation("good_layernorm_torch", backend="torch")
def good_layernorm_torch(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    """Correct: two-pass mean/variance in float32."""
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).pow(2).mean(-1, keepdim=True)
    return ((xf - mean) * torch.rsqrt(var + eps) * w.float() + b.float()).to(x.dtype)


@layernorm.implementation("bad_layernorm_unmasked_centring", backend="triton")
def bad_layernorm_unmasked_centring(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    """Bug: padding lanes load as 0 (right for the mean) but are not re-masked after centring, so each adds mean^2
    to the variance (the step the Triton layer-norm tutorial does with tl.where(cols < N, x - mean, 0.)).

    Exact when N is a power of two (the happy N=1024: no padding). For N=1000 (declared) 24 padded lanes add
    24 * mean^2 (mean ~1 for inputs in [-1, 3]) to a sum of ~1300: outputs ~1% off; worse for N=257.
    """
    return _launch(x, w, b, eps, mask_centred=False)
