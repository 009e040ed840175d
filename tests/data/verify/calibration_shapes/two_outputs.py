"""Two outputs of different sizes, both differentiable: a softmax (M, N) and its row logsumexp (M,)."""

from __future__ import annotations

import torch

import opgate

softmax_lse = opgate.Operator(
    "softmax_lse",
    reference=lambda x: (torch.softmax(x, dim=-1), torch.logsumexp(x, dim=-1)),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits", requires_grad=True)],
    dims={"M": [4], "N": [32]},
    dtypes=["float32"],
)


@softmax_lse.implementation("torch")
def softmax_lse_torch(x):
    return torch.softmax(x, dim=-1), torch.logsumexp(x, dim=-1)
