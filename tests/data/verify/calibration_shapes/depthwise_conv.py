"""A causal depthwise conv1d helper (the short convolution of Mamba-style and Hyena attention blocks): F.conv1d with
groups=D on a weight and a bias input, all three requiring grad. The bias gradient is the upstream gradient summed
over batch and time: it depends on no input (the calibration crashed on it, like the layer norm's)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import opgate


def causal_depthwise_conv(x, w, b):
    """x (B, D, L), w (D, K), b (D,): out[b, d, t] = bias[d] + sum_k w[d, k] x[b, d, t - K + 1 + k]."""
    D, K = w.shape
    return F.conv1d(x, w.unsqueeze(1), b, padding=K - 1, groups=D)[..., : x.shape[-1]]


depthwise_conv = opgate.Operator(
    "depthwise_conv",
    reference=causal_depthwise_conv,
    inputs=[
        opgate.TensorSpec("x", ("B", "D", "L"), requires_grad=True),
        opgate.TensorSpec("w", ("D", "K"), kind="uniform", low=-0.5, high=0.5, requires_grad=True),
        opgate.TensorSpec("b", ("D",), kind="uniform", requires_grad=True),
    ],
    dims={"B": [2], "D": [8], "L": [16], "K": [4]},
    dtypes=["float32"],
    exact_dims=["D", "K"],
)


@depthwise_conv.implementation("torch")
def depthwise_conv_torch(x, w, b):
    return causal_depthwise_conv(x, w, b)
