"""Held-out corpus: mamba-ssm 2.3.2.post1 Triton MLP pieces (mamba_ssm.ops.triton), forward and gradients.

- mamba_swiglu: k_activations.swiglu(xy) (the SwiGLU autograd.Function): xy is split in halves along the last dim,
  x, y = xy.chunk(2, -1), and the output is silu(x) * y; D = 2 x H (derived); gradient for xy.
- mamba_layer_norm_linear: layer_norm.layer_norm_linear_fn(x, norm_w, norm_b, W, bias, eps): F.linear(F.layer_norm(x),
  W, bias), LayerNorm fused with the projection that follows it (LayerNormLinearFn); gradients for x, norm_w,
  norm_b, W and bias.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch.nn.functional as F

import opgate

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the spec's folder: _mamba_env.py
import _mamba_env  # noqa: E402, F401  (bare mamba_ssm package and CUDA-query shims on a CPU machine)
from mamba_ssm.ops.triton.k_activations import swiglu  # noqa: E402
from mamba_ssm.ops.triton.layer_norm import layer_norm_linear_fn  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16"]


# ---------------------------------------------------------------- SwiGLU on the fused [x | y] projection
def _swiglu_ref(xy):
    x, y = xy.chunk(2, dim=-1)
    return F.silu(x) * y


mamba_swiglu = opgate.Operator(
    "mamba_swiglu",
    reference=_swiglu_ref,
    inputs=[opgate.TensorSpec("xy", ("M", "D"), requires_grad=True)],
    dims={"M": [16, 3], "H": [4096, 1000]},  # H: MLP hidden size (each half)
    derived_dims={"D": lambda H: 2 * H},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "H": 11008},
)


@mamba_swiglu.implementation("mamba_swiglu", backend="triton")
def _mamba_swiglu(xy):
    return swiglu(xy)


# ---------------------------------------------------------------- LayerNorm fused with the next Linear
def _layer_norm_linear_ref(x, norm_w, norm_b, W, bias, eps):
    return F.linear(F.layer_norm(x, (x.shape[-1],), norm_w, norm_b, eps), W, bias)


mamba_layer_norm_linear = opgate.Operator(
    "mamba_layer_norm_linear",
    reference=_layer_norm_linear_ref,
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("norm_w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.TensorSpec("norm_b", ("N",), requires_grad=True),
        opgate.TensorSpec("W", ("O", "N"), kind="uniform", low=-0.05, high=0.05, requires_grad=True),
        opgate.TensorSpec("bias", ("O",), requires_grad=True),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"M": [16, 5], "N": [768, 1000], "O": [256, 200]},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "N": 2048, "O": 2048},
)


@mamba_layer_norm_linear.implementation("mamba_layer_norm_linear_fn", backend="triton")
def _mamba_layer_norm_linear(x, norm_w, norm_b, W, bias, eps):
    return layer_norm_linear_fn(x, norm_w, norm_b, W, bias, eps=eps)
