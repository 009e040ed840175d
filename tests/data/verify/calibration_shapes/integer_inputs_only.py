"""An operator whose inputs are all integers and whose output is float: token frequencies of a batch (no float
input to differentiate, perturb or shift)."""

from __future__ import annotations

import torch

import opgate


def token_frequencies(ids, V):
    counts = torch.zeros(V, dtype=torch.float32).index_add_(0, ids.reshape(-1), torch.ones(ids.numel()))
    return counts / max(ids.numel(), 1)


token_frequencies_op = opgate.Operator(
    "token_frequencies",
    reference=lambda ids: token_frequencies(ids, 64),
    inputs=[opgate.TensorSpec("ids", ("M", "T"), dtype="int64", kind="index", high=64)],
    dims={"M": [2], "T": [16]},
    dtypes=["float32"],
)


@token_frequencies_op.implementation("torch")
def token_frequencies_torch(ids):
    return torch.bincount(ids.reshape(-1), minlength=64).to(torch.float32) / max(ids.numel(), 1)
