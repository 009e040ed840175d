"""A spec whose second implementation runs on a plugin backend (planted_numpy)."""

import numpy as np
import torch

import opgate

relu = opgate.Operator(
    "relu",
    reference=lambda x: torch.relu(x),
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [4, 7], "N": [8, 33]},
    dtypes=["float32"],
)


@relu.implementation("torch")
def relu_torch(x):
    return torch.clamp_min(x, 0)


@relu.implementation("numpy", backend="planted_numpy")
def relu_numpy(x):
    return np.maximum(x, 0)
