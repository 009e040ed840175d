"""Library corpus: attorch (67c2772) softmax layers and the fused Linear layer, forward and gradients (on a GPU, and on
the CPU through Triton's interpreter: see _attorch_env.py). Half precision: half inputs and a half layer, no autocast
(the input dtype flows through).

- attorch_softmax: attorch.Softmax(dim=-1) = torch.softmax over the last dim ("Only softmax along the last dimension
  is supported"); logits up to a 32000-word vocabulary; gradient for x.
- attorch_log_softmax: attorch.LogSoftmax(dim=-1) = F.log_softmax; gradient for x.
- attorch_linear_gelu: attorch.Linear(K, N, act_func="gelu") = gelu(x W + b). attorch's docstring: "Unlike PyTorch's
  linear layer, the weight matrix in this module is of shape [in_features, out_features]", so W is (K, N) and the
  reference is x @ W + b (not F.linear). Gradients for x, W and b.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import opgate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _attorch_env import attorch, implementation, layer, with_params  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16"]


# ---------------------------------------------------------------- Softmax / LogSoftmax
attorch_softmax = opgate.Operator(
    "attorch_softmax",
    reference=lambda x: torch.softmax(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits", requires_grad=True)],
    dims={"M": [64, 7], "N": [32000, 4096, 1000]},
    dtypes=DTYPES,
    perf_dims={"M": 4096, "N": 32000},
)


@implementation(attorch_softmax, "attorch_softmax")
def _attorch_softmax(x):
    return attorch.Softmax(dim=-1)(x)


attorch_log_softmax = opgate.Operator(
    "attorch_log_softmax",
    reference=lambda x: F.log_softmax(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits", requires_grad=True)],
    dims={"M": [64, 7], "N": [32000, 4096, 1000]},
    dtypes=DTYPES,
    perf_dims={"M": 4096, "N": 32000},
)


@implementation(attorch_log_softmax, "attorch_log_softmax")
def _attorch_log_softmax(x):
    return attorch.LogSoftmax(dim=-1)(x)


# ---------------------------------------------------------------- Linear + bias + GELU, fused
attorch_linear_gelu = opgate.Operator(
    "attorch_linear_gelu",
    reference=lambda x, w, b: F.gelu(x @ w + b),
    inputs=[
        opgate.TensorSpec("x", ("M", "K"), requires_grad=True),
        opgate.TensorSpec("w", ("K", "N"), kind="uniform", low=-0.05, high=0.05, requires_grad=True),
        opgate.TensorSpec("b", ("N",), kind="uniform", low=-0.05, high=0.05, requires_grad=True),
    ],
    dims={"M": [64, 7], "K": [1024, 768], "N": [4096, 1000]},
    dtypes=DTYPES,
    perf_dims={"M": 8192, "K": 4096, "N": 4096},
)


@implementation(attorch_linear_gelu, "attorch_linear_gelu")
def _attorch_linear_gelu(x, w, b):
    lin = layer("Linear", w.shape[0], w.shape[1], act_func="gelu", device=x.device, dtype=x.dtype)
    return with_params(lin, {"weight": w, "bias": b}, x)
