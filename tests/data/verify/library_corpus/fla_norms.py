"""Library corpus: fla-core 0.6.0 (flash-linear-attention) fused norms, forward and gradients.

- fla_layer_norm: fla.modules.layernorm.layer_norm(x, weight, bias, eps): F.layer_norm over the last dim
  (fla.modules.LayerNorm); gradients for x, weight and bias.
- fla_rms_norm_residual: rms_norm(x, weight, None, residual=r): RMSNorm of x + r (the pre-norm residual add fused
  in, prenorm=False returns the normalised output only); gradients for x, r and weight.
- fla_group_norm: group_norm(x, weight, bias, num_groups=4) over the last dim (fla.modules.GroupNorm): the same
  as F.group_norm on (rows, channels); gradients for x, weight, bias. N = 4 x the group size (derived).
- fla_rms_norm_gated: fla.modules.FusedRMSNormGated (rms_norm_gated, activation "swish"): RMSNorm(x) * w * silu(g)
  as the output gate of GLA/RetNet; gradients for x, g and weight.
- fla_l2norm: fla.modules.l2norm(x, eps): x / sqrt(sum x^2 + eps) over the last dim (qk-norm of linear
  attention); gradient for x.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import opgate

from fla.modules.fused_norm_gate import rms_norm_gated
from fla.modules.l2norm import l2norm
from fla.modules.layernorm import group_norm, layer_norm, rms_norm

DTYPES = ["float32", "float16", "bfloat16"]


# ---------------------------------------------------------------- LayerNorm
fla_layer_norm = opgate.Operator(
    "fla_layer_norm",
    reference=lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.TensorSpec("b", ("N",), requires_grad=True),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"M": [16, 5], "N": [1024, 4096]},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "N": 4096},
)


@fla_layer_norm.implementation("fla_layer_norm", backend="triton")
def _fla_layer_norm(x, w, b, eps):
    return layer_norm(x, w, b, eps=eps)


# ---------------------------------------------------------------- RMSNorm with the residual add fused in
def _rms_norm_residual_ref(x, r, w, eps):
    h = x + r
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w


fla_rms_norm_residual = opgate.Operator(
    "fla_rms_norm_residual",
    reference=_rms_norm_residual_ref,
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("r", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.Scalar("eps", 1e-6),
    ],
    dims={"M": [16, 5], "N": [2048, 1000]},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "N": 4096},
)


@fla_rms_norm_residual.implementation("fla_rms_norm", backend="triton")
def _fla_rms_norm_residual(x, r, w, eps):
    return rms_norm(x, w, None, residual=r, eps=eps)


# ---------------------------------------------------------------- GroupNorm over the last dim
GROUPS = 4

fla_group_norm = opgate.Operator(
    "fla_group_norm",
    reference=lambda x, w, b, eps: F.group_norm(x, GROUPS, w, b, eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.TensorSpec("b", ("N",), requires_grad=True),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"M": [16, 5], "G": [256, 512]},  # G: channels per group
    derived_dims={"N": lambda G: GROUPS * G},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "G": 1024},
)


@fla_group_norm.implementation("fla_group_norm", backend="triton")
def _fla_group_norm(x, w, b, eps):
    return group_norm(x, w, b, eps=eps, num_groups=GROUPS)


# ---------------------------------------------------------------- RMSNorm with a swish output gate
def _rms_norm_gated_ref(x, g, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w * F.silu(g)


fla_rms_norm_gated = opgate.Operator(
    "fla_rms_norm_gated",
    reference=_rms_norm_gated_ref,
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("g", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"M": [16, 5], "N": [512, 1024]},  # the value head dim of GLA/RetNet/GDN
    dtypes=DTYPES,
    perf_dims={"M": 65536, "N": 512},
)


@fla_rms_norm_gated.implementation("fla_rms_norm_gated", backend="triton")
def _fla_rms_norm_gated(x, g, w, eps):
    return rms_norm_gated(x, g, w, None, activation="swish", eps=eps)


# ---------------------------------------------------------------- L2 norm
fla_l2norm = opgate.Operator(
    "fla_l2norm",
    reference=lambda x, eps: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "D"), requires_grad=True),
        opgate.Scalar("eps", 1e-6),
    ],
    dims={"M": [32, 7], "D": [128, 64]},  # per-head q/k normalisation
    dtypes=DTYPES,
    perf_dims={"M": 262144, "D": 128},
)


@fla_l2norm.implementation("fla_l2norm", backend="triton")
def _fla_l2norm(x, eps):
    return l2norm(x, eps=eps)
