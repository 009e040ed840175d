"""GELU, exact (erf) and tanh-approximate forms, as activation kernels ship them (blind8 corpus).

Operator gelu: reference F.gelu(x) (erf form).
- good_gelu_erf_triton (correct): 0.5 x (1 + erf(x / sqrt 2)) in float32 with `tl.erf`, strided loads, masked tail.
- bad_gelu_tanh_for_erf_triton (buggy, typical): the tanh approximation served where the erf form is the contract
  (the mix-up behind HF transformers' separate "gelu" / "gelu_new" / "gelu_pytorch_tanh" activations and PyTorch's
  `approximate=` argument). |tanh-GELU - erf-GELU| reaches ~4.7e-4 near |x| ~ 2: about 4000 float32 ulp, half an fp16
  ulp, a fraction of a bf16 ulp. A model trained with erf-GELU gets a systematically different activation; a demanding
  user deserves a failure (in fp32 at least), so: fail.

Operator gelu_tanh: reference F.gelu(x, approximate="tanh").
- good_gelu_tanh_sigmoid_exp2_triton (correct, fast-math): uses 0.5 (1 + tanh(u)) = sigmoid(2u), so
  y = x / (1 + exp2(-2u log2 e)): one exp2 (ex2.approx on a GPU), no cancellation in 1 + tanh(u) for x << 0, and
  exp2 -> inf gives x / inf = -0 for very negative x, +x for very positive x (the form fused GeGLU kernels use).
- bad_gelu_tanh_overflow_triton (buggy, nonfinite): tanh(u) = (e^{2u} - 1) / (e^{2u} + 1) written out; e^{2u}
  overflows float32 at 2u > 88.7 (x > ~10) and inf / inf = NaN. The textbook tanh that hand-written Triton kernels
  used before `libdevice.tanh` (the NaN-for-large-input reports against custom tanh in several Triton ports).
"""

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
    dims={"M": [4, 7], "N": [64, 200]},
    dtypes=["float32", "float16"],
)

gelu_tanh = opgate.Operator(
    "gelu_tanh",
    reference=lambda x: F.gelu(x, approximate="tanh"),
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [4, 7], "N": [64, 200]},
    dtypes=["float32", "float16"],
)

BLOCK = 256


@triton.jit
def _gelu_kernel(x_ptr, y_ptr, N, sxm, sxn, BLOCK: tl.constexpr, FORM: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * sxm + cols * sxn, mask=mask, other=0.0).to(tl.float32)
    if FORM == 0:  # exact erf form
        y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    elif FORM == 1:  # tanh form through sigmoid(2u) with exp2
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        y = x / (1.0 + tl.exp2(-2.8853900817779268 * u))  # 2 * log2(e) * u
    else:  # tanh form with a written-out tanh that overflows
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        e2u = tl.exp(2.0 * u)
        t = (e2u - 1.0) / (e2u + 1.0)
        y = 0.5 * x * (1.0 + t)
    tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch(x: torch.Tensor, form: int) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0 or N == 0:
        return y
    _gelu_kernel[(M, triton.cdiv(N, BLOCK))](x, y, N, x.stride(0), x.stride(1), BLOCK=BLOCK, FORM=form)
    return y


@gelu.implementation("good_gelu_erf_triton", backend="triton")
def good_gelu_erf_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch(x, 0)


@gelu.implementation("bad_gelu_tanh_for_erf_triton", backend="triton")
def bad_gelu_tanh_for_erf_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch(x, 1)


@gelu_tanh.implementation("good_gelu_tanh_sigmoid_exp2_triton", backend="triton")
def good_gelu_tanh_sigmoid_exp2_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch(x, 1)


@gelu_tanh.implementation("bad_gelu_tanh_overflow_triton", backend="triton")
def bad_gelu_tanh_overflow_triton(x: torch.Tensor) -> torch.Tensor:
    return _launch(x, 2)
