"""An autotuned Triton kernel (two configs): Triton's autotuner benchmarks configs through the GPU driver, which the
CPU interpreter does not have; opgate runs the first config there (verify/backends/triton_backend.py)."""

import torch
import triton
import triton.language as tl

import opgate

scale = opgate.Operator(
    "scale", reference=lambda x: x * 3.0, inputs=[opgate.TensorSpec("x", ("N",))], dims={"N": [100, 1000]},
    dtypes=["float32"],
)


@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
@triton.jit
def _scale_kernel(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(in_ptr + offsets, mask=mask) * 3.0, mask=mask)


@scale.implementation("triton")
def scale_triton(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    _scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](out, x, n)
    return out
