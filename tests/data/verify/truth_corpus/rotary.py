"""Truth corpus: rotary position embedding (GPT-NeoX halves layout) on a (M, D) slab with (M, D/2) tables.

out[:, :H] = x1 * cos - x2 * sin, out[:, H:] = x2 * cos + x1 * sin, with x1 = x[:, :H], x2 = x[:, H:], H = D // 2
declared as a derived dim (derived_dims={"H": lambda D: D // 2}).

- good_rotary_bf16_triton: computes in bfloat16 as loaded (how many production bf16 rotary kernels are written).
  Right on a GPU; Triton's CPU interpreter does bfloat16 arithmetic on raw 16-bit patterns, so on the CPU its
  output is garbage that says nothing about the kernel (a known interpreter limitation).
- good_rotary_f32_triton: upcasts to float32, computes, rounds once on the store.
- bad_rotary_stride_triton: the float32 kernel, but addresses x as contiguous (row stride D): wrong on views.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate


def _rotary_reference(x, cos, sin):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


rotary = opgate.Operator(
    "rotary",
    reference=_rotary_reference,
    inputs=[
        opgate.TensorSpec("x", ("M", "D"), kind="normal"),
        opgate.TensorSpec("cos", ("M", "H"), kind="uniform", low=-1.0, high=1.0),
        opgate.TensorSpec("sin", ("M", "H"), kind="uniform", low=-1.0, high=1.0),
    ],
    dims={"M": [8, 5], "D": [64, 128]},
    derived_dims={"H": lambda D: D // 2},
    exact_dims=["D"],
    dtypes=["bfloat16", "float32"],
)


@triton.jit
def _rotary(x_ptr, c_ptr, s_ptr, y_ptr, H, sxm, sxd, scm, scd, ssm, ssd, sym, BLOCK: tl.constexpr,
            UPCAST: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < H
    x1 = tl.load(x_ptr + row * sxm + offs * sxd, mask=mask, other=0.0)
    x2 = tl.load(x_ptr + row * sxm + (offs + H) * sxd, mask=mask, other=0.0)
    c = tl.load(c_ptr + row * scm + offs * scd, mask=mask, other=0.0)
    s = tl.load(s_ptr + row * ssm + offs * ssd, mask=mask, other=0.0)
    if UPCAST:
        x1 = x1.to(tl.float32)
        x2 = x2.to(tl.float32)
        c = c.to(tl.float32)
        s = s.to(tl.float32)
    o1 = x1 * c - x2 * s
    o2 = x2 * c + x1 * s
    tl.store(y_ptr + row * sym + offs, o1.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(y_ptr + row * sym + offs + H, o2.to(y_ptr.dtype.element_ty), mask=mask)


def _launch(x, cos, sin, upcast: bool, assume_contiguous: bool = False):
    M, D = x.shape
    H = D // 2
    y = torch.empty((M, D), dtype=x.dtype, device=x.device)
    if M == 0 or H == 0:
        return y
    sxm, sxd = (D, 1) if assume_contiguous else (x.stride(0), x.stride(1))
    _rotary[(M,)](x, cos, sin, y, H, sxm, sxd, cos.stride(0), cos.stride(1), sin.stride(0), sin.stride(1),
                  y.stride(0), BLOCK=triton.next_power_of_2(H), UPCAST=upcast)
    return y


@rotary.implementation("good_rotary_bf16_triton", backend="triton")
def good_rotary_bf16_triton(x, cos, sin):
    return _launch(x, cos, sin, upcast=False)


@rotary.implementation("good_rotary_f32_triton", backend="triton")
def good_rotary_f32_triton(x, cos, sin):
    return _launch(x, cos, sin, upcast=True)


@rotary.implementation("bad_rotary_stride_triton", backend="triton")
def bad_rotary_stride_triton(x, cos, sin):
    return _launch(x, cos, sin, upcast=True, assume_contiguous=True)
