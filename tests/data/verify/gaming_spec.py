"""Implementations that game a benchmark loop (KernelBench's lessons), each beside an honest twin.

relu:
  torch, triton          honest
  relu_cached            returns the result cached for the input's shape
  relu_inplace           x.relu_(): mutates its input and returns an alias of it
  relu_mutating          right result, then doubles its input in place
copy (the reference returns a new tensor):
  torch                  honest x.clone()
  copy_view              x.view_as(x): an alias of the input
scale (2x):
  torch                  honest
  scale_side_stream      on a GPU: computes on its own stream and returns without making the caller's stream
                         wait (on a CPU it is honest: there are no streams)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

relu = opgate.Operator(
    "relu",
    reference=torch.relu,
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [4, 8], "N": [16, 33]},
    dtypes=["float32"],
)


@triton.jit
def _relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.where(x < 0, 0.0, x), mask=mask)  # NaN propagates (tl.maximum would drop it)


@relu.implementation("torch")
def relu_torch(x):
    return torch.relu(x)


@relu.implementation("triton")
def relu_triton(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel():
        _relu_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
    return y


_CACHE: dict[tuple[int, ...], torch.Tensor] = {}


@relu.implementation("relu_cached", backend="torch")
def relu_cached(x):
    key = tuple(x.shape)
    if key not in _CACHE:
        _CACHE[key] = torch.relu(x)
    return _CACHE[key]


@relu.implementation("relu_inplace", backend="torch")
def relu_inplace(x):
    return x.relu_()


@relu.implementation("relu_mutating", backend="torch")
def relu_mutating(x):
    y = torch.relu(x)
    x.mul_(2)
    return y


copy = opgate.Operator(
    "copy",
    reference=lambda x: x.clone(),
    inputs=[opgate.TensorSpec("x", ("N",))],
    dims={"N": [16, 100]},
    dtypes=["float32"],
)


@copy.implementation("torch")
def copy_torch(x):
    return x.clone()


@copy.implementation("copy_view", backend="torch")
def copy_view(x):
    return x.view_as(x)


scale = opgate.Operator(
    "scale",
    reference=lambda x: x * 2,
    inputs=[opgate.TensorSpec("x", ("N",))],
    dims={"N": [4096, 65536]},
    dtypes=["float32"],
)


@scale.implementation("torch")
def scale_torch(x):
    return x * 2


@scale.implementation("scale_side_stream", backend="torch")
def scale_side_stream(x):
    if not x.is_cuda:
        return x * 2
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # it reads the inputs correctly; nobody waits for its result
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # ~10 ms of GPU time: a slow kernel, so the race is not a coin toss
        return x * 2
