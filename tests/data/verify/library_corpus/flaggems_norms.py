"""Library corpus: FlagGems 5.0.2 normalisations (GPU only: `import flag_gems` raises "No device were detected on
your machine" without a GPU, and with GEMS_VENDOR=nvidia it asserts "Torch not compiled with CUDA enabled").

FlagGems registers Triton kernels as PyTorch's ATen implementations; `flag_gems.only_enable(include=[...])` (the
README's "only register a few ops") registers the named kernels for the whole process, so the forward AND the
autograd backward (native_layer_norm_backward, native_group_norm_backward) of F.layer_norm / F.group_norm on CUDA
tensors run FlagGems' Triton kernels. The CPU float64 reference is untouched (the registration is for CUDA).

- gems_layer_norm: F.layer_norm through FlagGems' layer_norm / layer_norm_backward; gradients for x, weight, bias.
- gems_rms_norm: flag_gems.ops.rms_norm(x, [N], weight, eps), its autograd.Function (Triton forward and backward);
  gradients for x and weight.
- gems_group_norm: F.group_norm on (batch, channels, spatial) through group_norm / group_norm_backward, 32 groups;
  gradients for x, weight, bias.
- gems_skip_layer_norm: flag_gems.skip_layer_norm(x, residual, [N], weight, bias, eps) = LayerNorm(x + residual)
  (forward only: its autograd.Function defines no backward).
"""

from __future__ import annotations

import torch.nn.functional as F

import flag_gems
import opgate

flag_gems.only_enable(include=["layer_norm", "layer_norm_backward", "group_norm", "group_norm_backward"])

DTYPES = ["float32", "float16", "bfloat16"]

gems_layer_norm = opgate.Operator(
    "gems_layer_norm",
    reference=lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.TensorSpec("b", ("N",), requires_grad=True),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"M": [64, 7], "N": [4096, 1024, 5120]},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "N": 4096},
)


@gems_layer_norm.implementation("gems_layer_norm", backend="triton")
def _gems_layer_norm(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def _rms_norm_ref(x, w, eps):
    return x * (x.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * w


gems_rms_norm = opgate.Operator(
    "gems_rms_norm",
    reference=_rms_norm_ref,
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.Scalar("eps", 1e-6),
    ],
    dims={"M": [64, 7], "N": [4096, 1024, 5120]},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "N": 4096},
)


@gems_rms_norm.implementation("gems_rms_norm", backend="triton")
def _gems_rms_norm(x, w, eps):
    return flag_gems.ops.rms_norm(x, [x.shape[-1]], w, eps)


GROUPS = 32

gems_group_norm = opgate.Operator(
    "gems_group_norm",
    reference=lambda x, w, b, eps: F.group_norm(x, GROUPS, w, b, eps),
    inputs=[
        opgate.TensorSpec("x", ("B", "C", "S"), requires_grad=True),
        opgate.TensorSpec("w", ("C",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.TensorSpec("b", ("C",), requires_grad=True),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"B": [4, 1], "G": [8, 16], "S": [196, 1024]},  # G: channels per group; S: spatial positions
    derived_dims={"C": lambda G: GROUPS * G},
    dtypes=DTYPES,
    perf_dims={"B": 32, "G": 16, "S": 4096},
)


@gems_group_norm.implementation("gems_group_norm", backend="triton")
def _gems_group_norm(x, w, b, eps):
    return F.group_norm(x, GROUPS, w, b, eps)


gems_skip_layer_norm = opgate.Operator(
    "gems_skip_layer_norm",
    reference=lambda x, r, w, b, eps: F.layer_norm(x + r, (x.shape[-1],), w, b, eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "N")),
        opgate.TensorSpec("r", ("M", "N")),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5),
        opgate.TensorSpec("b", ("N",)),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"M": [64, 7], "N": [4096, 1024]},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "N": 4096},
)


@gems_skip_layer_norm.implementation("gems_skip_layer_norm", backend="triton")
def _gems_skip_layer_norm(x, r, w, b, eps):
    return flag_gems.skip_layer_norm(x, r, [x.shape[-1]], w, b, eps)
