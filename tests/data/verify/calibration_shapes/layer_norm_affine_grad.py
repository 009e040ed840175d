"""A layer norm whose input, weight and bias all require grad.

The `.grad` twin's third output, the bias gradient, is the upstream gradient summed over rows: it depends on no
input, so its float64 graph reaches none of them (opgate crashed here in the calibration: issue "2 of 27 specs").
Its three outputs have different sizes: dx (M, N), dw (N,), db (N,).
"""

from __future__ import annotations

import torch

import opgate

layer_norm_affine = opgate.Operator(
    "layer_norm_affine",
    reference=lambda x, w, b: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), kind="uniform", low=-3.0, high=3.0, requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.TensorSpec("b", ("N",), kind="uniform", requires_grad=True),
    ],
    dims={"M": [4], "N": [32]},
    dtypes=["float32"],
)


@layer_norm_affine.implementation("torch")
def layer_norm_affine_torch(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
