"""Library corpus: FlagGems 5.0.2 activations and softmax (GPU only, see flaggems_norms.py).

`flag_gems.only_enable(include=[...])` registers FlagGems' Triton kernels as the CUDA implementations of aten.gelu,
aten._softmax, aten._log_softmax and their backward ops, so the forward and the autograd backward of F.gelu /
torch.softmax / F.log_softmax on CUDA tensors are FlagGems'.

- gems_gelu_tanh: F.gelu(x, approximate="tanh") through gelu / gelu_backward; gradient for x.
- gems_silu_and_mul: flag_gems.silu_and_mul(x, y) = silu(x) * y (autograd.Function); gradients for x and y.
- gems_gelu_and_mul: flag_gems.gelu_and_mul(x, y, approximate="tanh") = gelu_tanh(x) * y (GeGLU); gradients.
- gems_softmax: torch.softmax(x, -1) through softmax / softmax_backward; gradient for x.
- gems_log_softmax: F.log_softmax(x, -1) through log_softmax / log_softmax_backward; gradient for x.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import flag_gems
import opgate

flag_gems.only_enable(include=["gelu", "gelu_backward", "softmax", "softmax_backward", "log_softmax",
                               "log_softmax_backward"])

DTYPES = ["float32", "float16", "bfloat16"]
DIMS = {"M": [64, 7], "N": [11008, 4096, 1000]}
PERF = {"M": 16384, "N": 11008}

gems_gelu_tanh = opgate.Operator(
    "gems_gelu_tanh",
    reference=lambda x: F.gelu(x, approximate="tanh"),
    inputs=[opgate.TensorSpec("x", ("M", "N"), requires_grad=True)],
    dims=DIMS,
    dtypes=DTYPES,
    perf_dims=PERF,
)


@gems_gelu_tanh.implementation("gems_gelu", backend="triton")
def _gems_gelu(x):
    return F.gelu(x, approximate="tanh")


gems_silu_and_mul = opgate.Operator(
    "gems_silu_and_mul",
    reference=lambda x, y: F.silu(x) * y,
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("y", ("M", "N"), requires_grad=True),
    ],
    dims=DIMS,
    dtypes=DTYPES,
    perf_dims=PERF,
)


@gems_silu_and_mul.implementation("gems_silu_and_mul", backend="triton")
def _gems_silu_and_mul(x, y):
    return flag_gems.silu_and_mul(x, y)


gems_gelu_and_mul = opgate.Operator(
    "gems_gelu_and_mul",
    reference=lambda x, y: F.gelu(x, approximate="tanh") * y,
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("y", ("M", "N"), requires_grad=True),
    ],
    dims=DIMS,
    dtypes=DTYPES,
    perf_dims=PERF,
)


@gems_gelu_and_mul.implementation("gems_gelu_and_mul", backend="triton")
def _gems_gelu_and_mul(x, y):
    return flag_gems.gelu_and_mul(x, y, approximate="tanh")


gems_softmax = opgate.Operator(
    "gems_softmax",
    reference=lambda x: torch.softmax(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits", requires_grad=True)],
    dims={"M": [64, 7], "N": [32000, 4096, 1000]},
    dtypes=DTYPES,
    perf_dims={"M": 4096, "N": 32000},
)


@gems_softmax.implementation("gems_softmax", backend="triton")
def _gems_softmax(x):
    return torch.softmax(x, dim=-1)


gems_log_softmax = opgate.Operator(
    "gems_log_softmax",
    reference=lambda x: F.log_softmax(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits", requires_grad=True)],
    dims={"M": [64, 7], "N": [32000, 4096, 1000]},
    dtypes=DTYPES,
    perf_dims={"M": 4096, "N": 32000},
)


@gems_log_softmax.implementation("gems_log_softmax", backend="triton")
def _gems_log_softmax(x):
    return F.log_softmax(x, dim=-1)
