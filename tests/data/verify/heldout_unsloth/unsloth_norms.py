"""Held-out corpus: unsloth 2026.10.9 Triton norms (unsloth.kernels), forward and gradients.

- unsloth_rms_layernorm: kernels.rms_layernorm.fast_rms_layernorm(layernorm, X), the forward of unsloth's
  LlamaRMSNorm replacement (`Unsloth_LlamaRMSNorm.forward`): it reads `layernorm.weight` and
  `layernorm.variance_epsilon` and returns RMSNorm(X) * weight, i.e. transformers' LlamaRMSNorm:
  X / sqrt(mean(X^2, -1) + eps) * weight (Fast_RMS_Layernorm autograd.Function); gradients for X and weight.
- unsloth_layernorm: kernels.layernorm.fast_layernorm(layernorm, X) for an affine nn.LayerNorm (it reads weight,
  bias, eps): F.layer_norm(X, (N,), weight, bias, eps) (Fast_Layernorm); gradients for X, weight and bias.

The functions take the norm module; the specs hand them a plain namespace with those attributes (what the library
reads), so that weight and bias are the tensors opgate draws.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import torch.nn.functional as F

import opgate

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the spec's folder: _unsloth_env.py
import _unsloth_env  # noqa: E402, F401  (bare unsloth packages and interpreter shims on a CPU machine)
from unsloth.kernels.layernorm import fast_layernorm  # noqa: E402
from unsloth.kernels.rms_layernorm import fast_rms_layernorm  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16"]


# ---------------------------------------------------------------- RMSNorm (LlamaRMSNorm)
def _rms_ref(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


unsloth_rms_layernorm = opgate.Operator(
    "unsloth_rms_layernorm",
    reference=_rms_ref,
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("weight", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.Scalar("eps", 1e-6),
    ],
    dims={"M": [16, 3], "N": [2048, 1000]},  # N: hidden size
    dtypes=DTYPES,
    perf_dims={"M": 16384, "N": 4096},
)


@unsloth_rms_layernorm.implementation("unsloth_fast_rms_layernorm", backend="triton")
def _unsloth_rms(x, weight, eps):
    return fast_rms_layernorm(types.SimpleNamespace(weight=weight, variance_epsilon=eps), x)


# ---------------------------------------------------------------- LayerNorm (affine)
def _layernorm_ref(x, weight, bias, eps):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


unsloth_layernorm = opgate.Operator(
    "unsloth_layernorm",
    reference=_layernorm_ref,
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("weight", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.TensorSpec("bias", ("N",), requires_grad=True),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"M": [16, 3], "N": [2048, 1000]},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "N": 4096},
)


@unsloth_layernorm.implementation("unsloth_fast_layernorm", backend="triton")
def _unsloth_layernorm(x, weight, bias, eps):
    return fast_layernorm(types.SimpleNamespace(elementwise_affine=True, weight=weight, bias=bias, eps=eps), x)
