"""int8 quantize and dequantize.

quantize_int8: per-tensor affine quantization, q = clamp(round_half_even(x / SCALE) + ZERO_POINT, -128, 127), the
meaning of torch.quantize_per_tensor and ONNX QuantizeLinear. The output is int8, so the operator declares
`quantized=`: opgate compares the integers exactly and after dequantization ((q - zero_point) * scale) and reports
the mismatch share and SQNR. Inputs are drawn N(0, 1), so |x| > 2.5 exercises saturation.

dequantize_int8: per-channel symmetric dequantization of an int8 matrix, y = q * scale[n], with a scale per
column in the dtype under test (how int8 weights are stored). Every int8 times a float16/bfloat16 scale is exact in
float32, so one rounding at the end reproduces torch's result bit for bit.

Implementations
- triton: elementwise kernels over the (M, N) view, reading through strides. Round-half-to-even is written with
  floor and a parity test (libdevice's rint is not available under Triton's interpreter), and x / scale uses
  div_rn (IEEE division, as torch on CPU) so ties land on the same side as the reference.
- torch: the formula on a float32 copy (exact for half inputs, so x / scale is rounded once, in float32) and
  q * scale in float32. (torch.quantize_per_tensor would do, but PyTorch deprecates the quantized dtypes.)
- onnxruntime: quantize.onnx (QuantizeLinear-13) and dequantize.onnx (DequantizeLinear-13, axis=1), float32 only,
  written by make_onnx_models.py.

Non-finite inputs: NaN has no int8 value (propagates_nonfinite=False); +-inf saturates to 127 / -128.
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
    dims={"M": [64, 5], "N": [1024, 1000, 4097]},
    perf_dims={"M": 8192, "N": 8192},  # the size the GPU runtime stage times and profiles
    dtypes=["float32", "float16", "bfloat16"],
    propagates_nonfinite=False,
    quantized={"scale": SCALE, "zero_point": ZERO_POINT, "dtype": "int8"},
    bytes=lambda M, N, itemsize: M * N * (itemsize + 1),
)
quantize.onnx_model("quantize.onnx")

dequantize = opgate.Operator(
    "dequantize_int8",
    reference=lambda q, scale: q.to(scale.dtype) * scale,
    inputs=[
        opgate.TensorSpec("q", ("M", "N"), dtype="int8", kind="integer", low=-128, high=127),
        opgate.TensorSpec("scale", ("N",), kind="uniform", low=1e-3, high=0.1),
    ],
    dims={"M": [64, 5], "N": [1024, 1000, 4097]},
    perf_dims={"M": 8192, "N": 8192},  # the size the GPU runtime stage times and profiles
    dtypes=["float32", "float16", "bfloat16"],
    propagates_nonfinite=False,
    bytes=lambda M, N, itemsize: M * N * (1 + itemsize) + N * itemsize,
)
dequantize.onnx_model("dequantize.onnx")

BLOCK = 1024


@triton.jit
def _quantize_kernel(x_ptr, q_ptr, numel, N, stride_xm, stride_xn, scale, zero_point, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    x = tl.load(x_ptr + (offs // N) * stride_xm + (offs % N) * stride_xn, mask=mask, other=0.0).to(tl.float32)
    y = tl.div_rn(x, scale)
    r = tl.floor(y)
    frac = y - r  # exact for |y| < 2**23; larger values saturate below anyway
    r_odd = (r - 2.0 * tl.floor(r * 0.5)) == 1.0
    r = tl.where((frac > 0.5) | ((frac == 0.5) & r_odd), r + 1.0, r)
    q = tl.minimum(tl.maximum(r + zero_point, -128.0), 127.0)
    tl.store(q_ptr + offs, q.to(tl.int8), mask=mask)


@triton.jit
def _dequantize_kernel(q_ptr, s_ptr, y_ptr, numel, N, stride_qm, stride_qn, stride_s, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    col = offs % N
    q = tl.load(q_ptr + (offs // N) * stride_qm + col * stride_qn, mask=mask, other=0).to(tl.float32)
    s = tl.load(s_ptr + col * stride_s, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, (q * s).to(y_ptr.dtype.element_ty), mask=mask)


@quantize.implementation("triton")
def quantize_triton(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    q = torch.empty((M, N), dtype=torch.int8, device=x.device)
    grid = (triton.cdiv(M * N, BLOCK),)
    _quantize_kernel[grid](x, q, M * N, N, x.stride(0), x.stride(1), SCALE, float(ZERO_POINT), BLOCK=BLOCK)
    return q


@quantize.implementation("torch")
def quantize_torch(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp(torch.round(x.float() / SCALE) + ZERO_POINT, -128, 127).to(torch.int8)


@dequantize.implementation("triton")
def dequantize_triton(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    M, N = q.shape
    y = torch.empty((M, N), dtype=scale.dtype, device=q.device)
    grid = (triton.cdiv(M * N, BLOCK),)
    _dequantize_kernel[grid](q, scale, y, M * N, N, q.stride(0), q.stride(1), scale.stride(0), BLOCK=BLOCK)
    return y


@dequantize.implementation("torch")
def dequantize_torch(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return (q.float() * scale.float()).to(scale.dtype)
