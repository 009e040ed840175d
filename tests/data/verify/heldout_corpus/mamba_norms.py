"""Held-out corpus: mamba-ssm 2.3.2.post1 Triton norms (mamba_ssm.ops.triton), forward and gradients.

- mamba_layer_norm_residual: layer_norm.layer_norm_fn(x, w, b, residual=r, eps): F.layer_norm of x + r (the
  residual add of a Mamba block fused in, prenorm=False returns the normalised output only); gradients for x, r,
  w and b.
- mamba_rms_norm_prenorm: layer_norm.rms_norm_fn(x, w, None, residual=r, prenorm=True, residual_in_fp32=True), the
  call of mamba_ssm's Block: returns (RMSNorm(x + r) * w, x + r), the new residual kept in float32; gradients for
  x, r and w.
- mamba_gated_rms_norm: layernorm_gated.rmsnorm_fn(x, w, None, z=z, group_size=G, norm_before_gate=False), Mamba2's
  output norm: per the RMSNorm docstring "norm(x * silu(z))" when norm_before_gate is False, a GroupNorm-style RMS
  over groups of G elements ("group_size ... each group having group_size elements"); N = 4 x G (derived);
  gradients for x, z and w.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import opgate

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the spec's folder: _mamba_env.py
import _mamba_env  # noqa: E402, F401  (bare mamba_ssm package and CUDA-query shims on a CPU machine)
from mamba_ssm.ops.triton.layer_norm import layer_norm_fn, rms_norm_fn  # noqa: E402
from mamba_ssm.ops.triton.layernorm_gated import rmsnorm_fn  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16"]
DIMS = {"M": [16, 5], "N": [2560, 1000]}  # d_model of mamba-2.8b, and a ragged tail
PERF = {"M": 16384, "N": 2560}


# ---------------------------------------------------------------- LayerNorm of x + residual
mamba_layer_norm_residual = opgate.Operator(
    "mamba_layer_norm_residual",
    reference=lambda x, r, w, b, eps: F.layer_norm(x + r, (x.shape[-1],), w, b, eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("r", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.TensorSpec("b", ("N",), requires_grad=True),
        opgate.Scalar("eps", 1e-5),
    ],
    dims=DIMS,
    dtypes=DTYPES,
    perf_dims=PERF,
)


@mamba_layer_norm_residual.implementation("mamba_layer_norm_fn", backend="triton")
def _mamba_layer_norm_residual(x, r, w, b, eps):
    return layer_norm_fn(x, w, b, residual=r, eps=eps)


# ---------------------------------------------------------------- RMSNorm, prenorm: (normed, new residual)
def _rms_norm_prenorm_ref(x, r, w, eps):
    h = x + r
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * w, h


mamba_rms_norm_prenorm = opgate.Operator(
    "mamba_rms_norm_prenorm",
    reference=_rms_norm_prenorm_ref,
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("r", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.Scalar("eps", 1e-5),
    ],
    dims=DIMS,
    dtypes=DTYPES,
    perf_dims=PERF,
)


@mamba_rms_norm_prenorm.implementation("mamba_rms_norm_fn", backend="triton")
def _mamba_rms_norm_prenorm(x, r, w, eps):
    return rms_norm_fn(x, w, None, residual=r, eps=eps, prenorm=True, residual_in_fp32=True)


# ---------------------------------------------------------------- Mamba2's gated group RMSNorm
GROUPS = 4


def _gated_rms_norm_ref(x, z, w, eps):
    h = x * F.silu(z)
    g = h.reshape(*h.shape[:-1], GROUPS, -1)
    g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps)
    return g.reshape(h.shape) * w


mamba_gated_rms_norm = opgate.Operator(
    "mamba_gated_rms_norm",
    reference=_gated_rms_norm_ref,
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("z", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"M": [16, 5], "G": [512, 200]},  # G: group size (d_inner / ngroups)
    derived_dims={"N": lambda G: GROUPS * G},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "G": 1280},
)


@mamba_gated_rms_norm.implementation("mamba_rmsnorm_fn_gated", backend="triton")
def _mamba_gated_rms_norm(x, z, w, eps):
    return rmsnorm_fn(x, w, None, z=z, eps=eps, group_size=x.shape[-1] // GROUPS, norm_before_gate=False)
