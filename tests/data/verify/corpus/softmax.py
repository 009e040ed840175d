"""Corpus: row softmax. Three correct implementations and five buggy ones (see BUGS)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

softmax = opgate.Operator(
    "softmax",
    reference=lambda x: torch.softmax(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")],
    dims={"M": [8, 5], "N": [256, 1000, 257]},
    dtypes=["float32", "float16"],
)

BUGS = {
    "bad_softmax_no_max_sub": {"kind": "no max-subtraction (overflow)", "exposed_by": {"scale": 100.0}},
    "bad_softmax_torch_no_max_sub": {"kind": "no max-subtraction (overflow)", "exposed_by": {"scale": 100.0}},
    "bad_softmax_online_no_rescale": {"kind": "online-softmax rescale", "exposed_by": {"dims": {"N": 1000}}},
    "bad_softmax_pad_zero": {"kind": "tail mask", "exposed_by": {"dims": {"N": 1000}}},
    "bad_softmax_assumes_contiguous": {"kind": "assumes contiguous", "exposed_by": {"noncontiguous": ["x"]}},
}

ONLINE_BLOCK = 256


@triton.jit
def _softmax_one_block(x_ptr, y_ptr, N, sxm, sxn, sym, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * sxm + offs * sxn, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, 0))
    tl.store(y_ptr + row * sym + offs, (e / tl.sum(e, 0)).to(y_ptr.dtype.element_ty), mask=mask)


@softmax.implementation("good_softmax_triton", backend="triton")
def good_softmax_triton(x: torch.Tensor) -> torch.Tensor:
    """Correct: one block per row, max-subtracted, padding loaded as -inf, strides honoured."""
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _softmax_one_block[(M,)](x, y, N, x.stride(0), x.stride(1), y.stride(0), BLOCK=triton.next_power_of_2(N))
    return y


@triton.jit
def _softmax_online(x_ptr, y_ptr, N, sxm, sxn, sym, BLOCK: tl.constexpr, RESCALE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = float("-inf")
    s = 0.0
    for start in range(0, N, BLOCK):
        cols = start + offs
        x = tl.load(x_ptr + row * sxm + cols * sxn, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, 0))
        m_new = tl.where(m_new == float("-inf"), 0.0, m_new)  # an all -inf prefix must not give -inf - -inf
        if RESCALE:
            s = s * tl.exp(m - m_new)
        s = s + tl.sum(tl.exp(x - m_new), 0)
        m = m_new
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_ptr + row * sxm + cols * sxn, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(y_ptr + row * sym + cols, (tl.exp(x - m) / s).to(y_ptr.dtype.element_ty), mask=mask)


def _online(x: torch.Tensor, rescale: bool) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _softmax_online[(M,)](x, y, N, x.stride(0), x.stride(1), y.stride(0), BLOCK=ONLINE_BLOCK, RESCALE=rescale)
    return y


@softmax.implementation("good_softmax_online_triton", backend="triton")
def good_softmax_online_triton(x: torch.Tensor) -> torch.Tensor:
    """Correct: online softmax in blocks of 256; the running sum is rescaled by exp(m_old - m_new)."""
    return _online(x, rescale=True)


@softmax.implementation("good_softmax_torch", backend="torch")
def good_softmax_torch(x: torch.Tensor) -> torch.Tensor:
    """Correct: max-subtracted formula in float32."""
    xf = x.float()
    e = torch.exp(xf - xf.amax(dim=-1, keepdim=True))
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


@softmax.implementation("bad_softmax_online_no_rescale", backend="triton")
def bad_softmax_online_no_rescale(x: torch.Tensor) -> torch.Tensor:
    """Bug: online softmax that forgets to rescale the running sum when the running max grows.

    Exact while a row fits one block of 256 (the happy N=256); wrong once N > 256 (declared N=1000, fuzzed 257)
    whenever a later block holds a larger max, i.e. almost always: the sum mixes terms taken against different maxima.
    """
    return _online(x, rescale=False)


@triton.jit
def _softmax_no_max(x_ptr, y_ptr, N, sxm, sxn, sym, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * sxm + offs * sxn, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x)
    tl.store(y_ptr + row * sym + offs, (e / tl.sum(e, 0)).to(y_ptr.dtype.element_ty), mask=mask)


@softmax.implementation("bad_softmax_no_max_sub", backend="triton")
def bad_softmax_no_max_sub(x: torch.Tensor) -> torch.Tensor:
    """Bug: exp(x) / sum(exp(x)) without subtracting the row max.

    Exact for N(0, 1) logits at every shape; exp overflows float32 for logits above ~88.7, giving inf / inf = NaN:
    exposed by large-magnitude logits (e.g. N(0, 100)) in any dtype.
    """
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _softmax_no_max[(M,)](x, y, N, x.stride(0), x.stride(1), y.stride(0), BLOCK=triton.next_power_of_2(N))
    return y


@softmax.implementation("bad_softmax_torch_no_max_sub", backend="torch")
def bad_softmax_torch_no_max_sub(x: torch.Tensor) -> torch.Tensor:
    """Bug: torch version of exp(x) / sum(exp(x)) without max-subtraction.

    Right for N(0, 1) logits; NaN rows once a logit exceeds ~88.7 (float32) or ~11 (float16): large magnitudes.
    """
    e = torch.exp(x)
    return e / e.sum(dim=-1, keepdim=True)


@triton.jit
def _softmax_pad_zero(x_ptr, y_ptr, N, sxm, sxn, sym, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * sxm + offs * sxn, mask=mask, other=0.0).to(tl.float32)
    e = tl.exp(x - tl.max(x, 0))
    tl.store(y_ptr + row * sym + offs, (e / tl.sum(e, 0)).to(y_ptr.dtype.element_ty), mask=mask)


@softmax.implementation("bad_softmax_pad_zero", backend="triton")
def bad_softmax_pad_zero(x: torch.Tensor) -> torch.Tensor:
    """Bug: the last block's padding is loaded as 0 instead of -inf, so padded lanes add exp(0 - max) to the sum.

    Exact when N is a power of two (the happy N=256: no padding); wrong for N=1000 (declared), 257 or any N that is
    not a power of two.
    """
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _softmax_pad_zero[(M,)](x, y, N, x.stride(0), x.stride(1), y.stride(0), BLOCK=triton.next_power_of_2(N))
    return y


@softmax.implementation("bad_softmax_assumes_contiguous", backend="triton")
def bad_softmax_assumes_contiguous(x: torch.Tensor) -> torch.Tensor:
    """Bug: addresses the row as x + row * N + col, i.e. assumes a contiguous row-major input.

    Exact on contiguous inputs of every shape; wrong on a transposed or column-sliced view (strides != (N, 1)),
    which the spec allows (contiguous=False).
    """
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _softmax_one_block[(M,)](x, y, N, N, 1, y.stride(0), BLOCK=triton.next_power_of_2(N))
    return y
