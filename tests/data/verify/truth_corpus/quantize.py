"""Truth corpus: per-tensor int8 quantization q = clamp(round_half_even(x / 0.02) + 3, -128, 127).

NaN has no int8 value: converting it is undefined behaviour in C, and PyTorch returns whatever the CPU's
conversion gives (0 on x86 for this reference). The spec keeps NaN inputs in play (propagates_nonfinite is left at
its default) so that cases with a NaN input are cases whose truth is undefined: not judged, only counted.

Correct
- good_quant_triton: x / scale with div_rn, round half to even by floor and a parity test, saturating clamp with
  tl.maximum / tl.minimum (which map NaN to a bound, as the GPU's saturating cvt does).
- good_quant_torch: the formula on a float32 copy.

Buggy
- bad_quant_round_half_up_triton: rounds with (x / scale + 0.5) truncated toward zero, the C idiom that is right for
  positives only: every negative value with fractional part below 0.5 lands one step too high.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

SCALE = 0.02
ZERO_POINT = 3

quantize = opgate.Operator(
    "quantize_int8",
    reference=lambda x: torch.clamp(torch.round(x / SCALE) + ZERO_POINT, -128, 127).to(torch.int8),
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [16, 5], "N": [512, 100]},
    dtypes=["float32"],
    quantized={"scale": SCALE, "zero_point": ZERO_POINT, "dtype": "int8"},
)

BLOCK = 1024


@triton.jit
def _quant(x_ptr, q_ptr, numel, N, sxm, sxn, scale, zp, BLOCK: tl.constexpr, HALF_EVEN: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    x = tl.load(x_ptr + (offs // N) * sxm + (offs % N) * sxn, mask=mask, other=0.0).to(tl.float32)
    v = tl.div_rn(x, scale)
    if HALF_EVEN:
        f = tl.floor(v)
        d = v - f
        odd = (f - 2.0 * tl.floor(f * 0.5)) == 1.0
        r = tl.where((d > 0.5) | ((d == 0.5) & odd), f + 1.0, f)
    else:
        r = (v + 0.5).to(tl.int32).to(tl.float32)  # truncates toward zero
    q = tl.minimum(tl.maximum(r + zp, -128.0), 127.0)
    tl.store(q_ptr + offs, q.to(tl.int8), mask=mask)


def _launch(x, half_even: bool):
    M, N = x.shape
    q = torch.empty((M, N), dtype=torch.int8, device=x.device)
    if M * N == 0:
        return q
    _quant[(triton.cdiv(M * N, BLOCK),)](x, q, M * N, N, x.stride(0), x.stride(1), SCALE, float(ZERO_POINT),
                                        BLOCK=BLOCK, HALF_EVEN=half_even)
    return q


@quantize.implementation("good_quant_triton", backend="triton")
def good_quant_triton(x):
    return _launch(x, half_even=True)


@quantize.implementation("good_quant_torch", backend="torch")
def good_quant_torch(x):
    return torch.clamp(torch.round(x.float() / SCALE) + ZERO_POINT, -128, 127).to(torch.int8)


@quantize.implementation("bad_quant_round_half_up_triton", backend="triton")
def bad_quant_round_half_up_triton(x):
    return _launch(x, half_even=False)
