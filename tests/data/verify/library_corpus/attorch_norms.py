"""Library corpus: attorch (67c2772) normalisation layers, forward and gradients (on a GPU, and on the CPU through
Triton's interpreter: see _attorch_env.py).

attorch's README: its layers "behave identically to their PyTorch equivalents" unless their docstrings say
otherwise, with AMP support; each layer takes `device` and `dtype` arguments. The specs build the layer in the dtype
under test (half inputs and half parameters, no autocast: outside autocast "the input dtype flows through") and
call it with the spec's weights (_attorch_env.with_params), so the references get the same parameters.

- attorch_layer_norm: attorch.LayerNorm(N, eps) = F.layer_norm over the last dim; gradients for x, weight, bias.
- attorch_rms_norm: attorch.RMSNorm(N, eps=1e-6) = x / sqrt(mean(x^2) + eps) * weight (eps given: its default is
  the input dtype's machine epsilon, which would differ between the float64 reference and the dtype under test);
  gradients for x and weight.
- attorch_batch_norm: attorch.BatchNorm1d(C) in training mode on (batch, features): normalised with the batch's
  own statistics, F.batch_norm(training=True); gradients for x, weight, bias.
- attorch_batch_norm_add_relu: attorch.BatchNorm1d(C, act_func="relu") on (batch, channels, length) with a residual
  added to the pre-activation result, `layer(x, pre_act_add=r)` = relu(BN(x) + r) (a ResNet block's tail, the fusion
  the README advertises); gradients for x, r, weight, bias.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import opgate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _attorch_env import implementation, layer, with_params  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16"]


# ---------------------------------------------------------------- LayerNorm
attorch_layer_norm = opgate.Operator(
    "attorch_layer_norm",
    reference=lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.TensorSpec("b", ("N",), requires_grad=True),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"M": [64, 7], "N": [768, 4096, 1000]},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "N": 4096},
)


@implementation(attorch_layer_norm, "attorch_layer_norm")
def _attorch_layer_norm(x, w, b, eps):
    ln = layer("LayerNorm", x.shape[-1], eps, device=x.device, dtype=x.dtype)
    return with_params(ln, {"weight": w, "bias": b}, x)


# ---------------------------------------------------------------- RMSNorm
def _rms_norm_ref(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


attorch_rms_norm = opgate.Operator(
    "attorch_rms_norm",
    reference=_rms_norm_ref,
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.Scalar("eps", 1e-6),
    ],
    dims={"M": [64, 7], "N": [4096, 1000]},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "N": 4096},
)


@implementation(attorch_rms_norm, "attorch_rms_norm")
def _attorch_rms_norm(x, w, eps):
    rms = layer("RMSNorm", x.shape[-1], eps, device=x.device, dtype=x.dtype)
    return with_params(rms, {"weight": w}, x)


# ---------------------------------------------------------------- BatchNorm1d, training mode
# BatchNorm inputs in a CNN/MLP follow a ReLU or a linear layer: a non-zero mean, where variance formulas go wrong.
attorch_batch_norm = opgate.Operator(
    "attorch_batch_norm",
    reference=lambda x, w, b, eps: F.batch_norm(x, None, None, w, b, training=True, eps=eps),
    inputs=[
        opgate.TensorSpec("x", ("B", "C"), kind="uniform", low=-1.0, high=3.0, requires_grad=True),
        opgate.TensorSpec("w", ("C",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.TensorSpec("b", ("C",), requires_grad=True),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"B": [256, 31], "C": [512, 64]},
    dtypes=DTYPES,
    perf_dims={"B": 4096, "C": 1024},
)


@implementation(attorch_batch_norm, "attorch_batch_norm")
def _attorch_batch_norm(x, w, b, eps):
    bn = layer("BatchNorm1d", x.shape[1], eps, device=x.device, dtype=x.dtype)  # modules start in training mode
    return with_params(bn, {"weight": w, "bias": b}, x)


# ---------------------------------------------------------------- BatchNorm1d + residual + ReLU, fused
def _batch_norm_add_relu_ref(x, r, w, b, eps):
    return F.relu(F.batch_norm(x, None, None, w, b, training=True, eps=eps) + r)


attorch_batch_norm_add_relu = opgate.Operator(
    "attorch_batch_norm_add_relu",
    reference=_batch_norm_add_relu_ref,
    inputs=[
        opgate.TensorSpec("x", ("B", "C", "L"), kind="uniform", low=-1.0, high=3.0, requires_grad=True),
        opgate.TensorSpec("r", ("B", "C", "L"), requires_grad=True),
        opgate.TensorSpec("w", ("C",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.TensorSpec("b", ("C",), requires_grad=True),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"B": [16, 3], "C": [64, 256], "L": [196, 49]},
    dtypes=DTYPES,
    perf_dims={"B": 64, "C": 256, "L": 3136},
)


@implementation(attorch_batch_norm_add_relu, "attorch_batch_norm_add_relu")
def _attorch_batch_norm_add_relu(x, r, w, b, eps):
    bn = layer("BatchNorm1d", x.shape[1], eps, act_func="relu", device=x.device, dtype=x.dtype)
    return with_params(bn, {"weight": w, "bias": b}, x, r)
