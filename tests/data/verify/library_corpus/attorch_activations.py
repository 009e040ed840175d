"""Library corpus: attorch (67c2772) activation layers and GLU, forward and gradients (on a GPU, and on the CPU through
Triton's interpreter: see _attorch_env.py).

The activation layers take `drop_p` (fused dropout, default 0: none) besides their PyTorch arguments; the specs
leave it at 0, so each layer is its PyTorch equivalent. Half precision: half inputs, no autocast (the input dtype
flows through).

- attorch_gelu: attorch.GELU() (approximate="none", the erf form) = F.gelu; gradient for x.
- attorch_mish: attorch.Mish() = F.mish = x tanh(softplus(x)); gradient for x.
- attorch_softplus: attorch.Softplus() = F.softplus (beta 1, threshold 20: nn.Softplus's defaults; attorch's
  Softplus documents no other argument); gradient for x.
- attorch_leaky_relu: attorch.LeakyReLU(negative_slope=0.2) = F.leaky_relu(x, 0.2) (by keyword: attorch's first
  positional argument is `inplace`, PyTorch's is negative_slope); gradient for x.
- attorch_glu: attorch.GLU() (dim=-1, act_func="sigmoid") = F.glu: a * sigmoid(b), a the first half of the last dim
  and b the second (nn.GLU's definition); gradient for x. D = 2H (derived).
- attorch_glu_silu: attorch.GLU(act_func="silu"), "the gated linear unit with an arbitrary activation function":
  a * silu(b), the GLU above with silu in place of sigmoid (SwiGLU on a fused up-projection); gradient for x.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch.nn.functional as F

import opgate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _attorch_env import attorch, implementation  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16"]
DIMS = {"M": [64, 7], "N": [4096, 1000]}
PERF = {"M": 16384, "N": 4096}

attorch_gelu = opgate.Operator(
    "attorch_gelu",
    reference=lambda x: F.gelu(x),
    inputs=[opgate.TensorSpec("x", ("M", "N"), requires_grad=True)],
    dims=DIMS,
    dtypes=DTYPES,
    perf_dims=PERF,
)


@implementation(attorch_gelu, "attorch_gelu")
def _attorch_gelu(x):
    return attorch.GELU()(x)


attorch_mish = opgate.Operator(
    "attorch_mish",
    reference=lambda x: F.mish(x),
    inputs=[opgate.TensorSpec("x", ("M", "N"), requires_grad=True)],
    dims=DIMS,
    dtypes=DTYPES,
    perf_dims=PERF,
)


@implementation(attorch_mish, "attorch_mish")
def _attorch_mish(x):
    return attorch.Mish()(x)


attorch_softplus = opgate.Operator(
    "attorch_softplus",
    reference=lambda x: F.softplus(x),
    inputs=[opgate.TensorSpec("x", ("M", "N"), requires_grad=True)],
    dims=DIMS,
    dtypes=DTYPES,
    perf_dims=PERF,
)


@implementation(attorch_softplus, "attorch_softplus")
def _attorch_softplus(x):
    return attorch.Softplus()(x)


attorch_leaky_relu = opgate.Operator(
    "attorch_leaky_relu",
    reference=lambda x: F.leaky_relu(x, 0.2),
    inputs=[opgate.TensorSpec("x", ("M", "N"), requires_grad=True)],
    dims=DIMS,
    dtypes=DTYPES,
    perf_dims=PERF,
)


@implementation(attorch_leaky_relu, "attorch_leaky_relu")
def _attorch_leaky_relu(x):
    return attorch.LeakyReLU(negative_slope=0.2)(x)


# ---------------------------------------------------------------- GLU: x = [a | b] along the last dim
GLU_DIMS = {"M": [64, 7], "H": [2048, 1000]}  # H: the output width; the input holds both halves, D = 2H
GLU_PERF = {"M": 16384, "H": 11008}

attorch_glu = opgate.Operator(
    "attorch_glu",
    reference=lambda x: F.glu(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "D"), requires_grad=True)],
    dims=GLU_DIMS,
    derived_dims={"D": lambda H: 2 * H},
    dtypes=DTYPES,
    perf_dims=GLU_PERF,
)


@implementation(attorch_glu, "attorch_glu")
def _attorch_glu(x):
    return attorch.GLU()(x)


def _glu_silu_ref(x):
    a, b = x.chunk(2, dim=-1)
    return a * F.silu(b)


attorch_glu_silu = opgate.Operator(
    "attorch_glu_silu",
    reference=_glu_silu_ref,
    inputs=[opgate.TensorSpec("x", ("M", "D"), requires_grad=True)],
    dims=GLU_DIMS,
    derived_dims={"D": lambda H: 2 * H},
    dtypes=DTYPES,
    perf_dims=GLU_PERF,
)


@implementation(attorch_glu_silu, "attorch_glu_silu")
def _attorch_glu_silu(x):
    return attorch.GLU(dim=-1, act_func="silu")(x)
