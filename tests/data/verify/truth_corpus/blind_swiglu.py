"""SwiGLU, y = silu(g) * u fused into one elementwise kernel (the MLP gate of Llama-style models; blind8 corpus).

- good_swiglu_triton (correct): float32 internally, sigmoid(g) = 1 / (1 + exp(-g)) (exp(-g) -> inf for g << 0
  gives g / inf = -0, the right limit), each input read through its own strides, masked tail (Liger-Kernel /
  unsloth style).
- good_swiglu_fastexp_triton (correct, fast-math): the same with exp written as 2^k * p(r), k = round(x log2 e),
  r = x - k ln 2 in two Cody-Waite parts, p a degree-7 Taylor polynomial (truncation ~5e-9 relative, ~1-2 ulp with
  its roundings), 2^k built from the exponent bits; above 88.72 it returns inf (as expf does). The kind of exp
  that fast-math CUDA / handwritten SIMD kernels ship.
- bad_swiglu_shared_stride_triton (buggy, layout): the kernel takes one (row, column) stride pair and uses it for
  both g and u, i.e. it assumes the two halves share a layout. vllm-project/vllm#3324: "ops.silu_and_mul ... only
  supports contiguous tensors. Non-contiguous tensors can also be run, but they will output incorrect results".
  Right whenever u happens to have g's strides, wrong on a transposed / sliced u.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import opgate

swiglu = opgate.Operator(
    "swiglu",
    reference=lambda g, u: F.silu(g) * u,
    inputs=[opgate.TensorSpec("g", ("M", "N")), opgate.TensorSpec("u", ("M", "N"))],
    dims={"M": [4, 7], "N": [64, 200]},
    dtypes=["float32", "float16"],
)

BLOCK = 256


@triton.jit
def _fast_exp(x):
    xc = tl.minimum(tl.maximum(x, -87.0), 88.0)
    k = tl.floor(xc * 1.4426950408889634 + 0.5)
    r = xc - k * 0.693145751953125          # ln2, high part (exact in float32 times small k)
    r = r - k * 1.4286068203094173e-06      # ln2, low part
    p = 1.0 + r * (1.0 + r * (0.5 + r * (0.16666666666666666 + r * (0.041666666666666664 + r * (
        0.008333333333333333 + r * (0.001388888888888889 + r * 0.0001984126984126984))))))
    scale = ((k.to(tl.int32) + 127) << 23).to(tl.float32, bitcast=True)
    y = p * scale
    y = tl.where(x > 88.72283935546875, float("inf"), y)
    y = tl.where(x < -87.33654022216797, 0.0, y)
    return y


@triton.jit
def _swiglu_kernel(g_ptr, u_ptr, y_ptr, N, sgm, sgn, sum_, sun, BLOCK: tl.constexpr, FAST: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    g = tl.load(g_ptr + row * sgm + cols * sgn, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + row * sum_ + cols * sun, mask=mask, other=0.0).to(tl.float32)
    if FAST:
        e = _fast_exp(-g)
    else:
        e = tl.exp(-g)
    y = g / (1.0 + e) * u
    tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch(g: torch.Tensor, u: torch.Tensor, fast: bool, shared_stride: bool) -> torch.Tensor:
    M, N = g.shape
    y = torch.empty((M, N), dtype=g.dtype, device=g.device)
    if M == 0 or N == 0:
        return y
    su = (g.stride(0), g.stride(1)) if shared_stride else (u.stride(0), u.stride(1))
    _swiglu_kernel[(M, triton.cdiv(N, BLOCK))](g, u, y, N, g.stride(0), g.stride(1), su[0], su[1], BLOCK=BLOCK,
                                               FAST=fast)
    return y


@swiglu.implementation("good_swiglu_triton", backend="triton")
def good_swiglu_triton(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    return _launch(g, u, fast=False, shared_stride=False)


@swiglu.implementation("good_swiglu_fastexp_triton", backend="triton")
def good_swiglu_fastexp_triton(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    return _launch(g, u, fast=True, shared_stride=False)


@swiglu.implementation("bad_swiglu_shared_stride_triton", backend="triton")
def bad_swiglu_shared_stride_triton(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    return _launch(g, u, fast=False, shared_stride=True)
