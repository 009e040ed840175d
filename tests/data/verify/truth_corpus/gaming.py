"""Truth corpus: implementations whose values are right on the first call but that game the harness.

Two operators: silu (y = x * sigmoid(x)) and copy (y = a fresh copy of x). What KernelBench learned about
benchmark-gaming kernels, as plain PyTorch:

- good_silu_torch: x * torch.sigmoid(x), a fresh output.
- bad_silu_cache_by_shape: memoises the output by (shape, dtype, device) "to skip recomputation": the second call
  with new data in same-shaped buffers returns the stale result.
- bad_silu_inplace: x.mul_(torch.sigmoid(x)) "to save memory": the values are right, but the caller's input is
  overwritten (and the output is the input).
- good_copy_torch: x.clone().
- bad_copy_alias: returns x itself: equal values, but the caller's output aliases its input.
"""

from __future__ import annotations

import torch

import opgate

silu = opgate.Operator(
    "silu",
    reference=lambda x: x * torch.sigmoid(x),
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [16, 5], "N": [256, 100]},
    dtypes=["float32"],
)

copy = opgate.Operator(
    "copy",
    reference=lambda x: x.clone(),
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [16, 5], "N": [256, 100]},
    dtypes=["float32"],
)

_CACHE: dict[tuple, torch.Tensor] = {}


@silu.implementation("good_silu_torch", backend="torch")
def good_silu_torch(x):
    return x * torch.sigmoid(x)


@silu.implementation("bad_silu_cache_by_shape", backend="torch")
def bad_silu_cache_by_shape(x):
    key = (tuple(x.shape), x.dtype, x.device)
    if key not in _CACHE:
        _CACHE[key] = x * torch.sigmoid(x)
    return _CACHE[key]


@silu.implementation("bad_silu_inplace", backend="torch")
def bad_silu_inplace(x):
    return x.mul_(torch.sigmoid(x))


@copy.implementation("good_copy_torch", backend="torch")
def good_copy_torch(x):
    return x.clone()


@copy.implementation("bad_copy_alias", backend="torch")
def bad_copy_alias(x):
    return x
