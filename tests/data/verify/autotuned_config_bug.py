"""An autotuned Triton kernel that is wrong in one of its four configs only (BLOCK=256 drops the last element of
each block): Triton's autotuner keeps whichever config is fastest on this GPU, which may never be that one; opgate
runs one config per key across the plan's sizes, so some case runs it, and the failure names the config."""

import torch
import triton
import triton.language as tl

import opgate

scale = opgate.Operator(
    "scale", reference=lambda x: x * 3.0, inputs=[opgate.TensorSpec("x", ("N",))], dims={"N": [1000, 4099]},
    dtypes=["float32"],
)

CONFIGS = [triton.Config({"BLOCK": block}, num_warps=4) for block in (64, 128, 256, 512)]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def _scale_kernel(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    if BLOCK == 256:  # the planted bug: this config leaves the last element of its block unwritten
        mask = mask & (tl.arange(0, BLOCK) < BLOCK - 1)
    tl.store(out_ptr + offsets, tl.load(in_ptr + offsets, mask=mask) * 3.0, mask=mask)


@scale.implementation("triton")
def scale_triton(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    _scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](out, x, n)
    return out
