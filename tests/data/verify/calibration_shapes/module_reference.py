"""References that are nn.Modules holding their own parameters (requires_grad=True, as modules make them): an
RMSNorm with a learned weight, an embedding lookup whose only input is integer token ids, and a learned-step
quantizer whose second output (its step, one per row) depends on its parameter alone. Their outputs carry a
grad_fn through the parameters, which are no input of the operator: the step's graph reaches no input at all."""

from __future__ import annotations

import torch

import opgate


class RMSNorm(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, n))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight.to(x.dtype)


class Embedding(torch.nn.Module):
    def __init__(self, rows: int, width: int) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(rows, width, generator=torch.Generator().manual_seed(0)))

    def forward(self, ids):
        return self.table[ids] * 2.0


class LearnedStepQuantizer(torch.nn.Module):
    """Fake quantization with a learned step (LSQ): the dequantized values and the step each row used."""

    def __init__(self) -> None:
        super().__init__()
        self.step = torch.nn.Parameter(torch.tensor(0.25))

    def forward(self, x):
        step = self.step.to(x.dtype)
        return torch.clamp(torch.round(x / step), -128, 127) * step, step.expand(x.shape[0]) * 1.0


rmsnorm_module = opgate.Operator(
    "rmsnorm_module",
    reference=RMSNorm(32),
    inputs=[opgate.TensorSpec("x", ("M", "N"), requires_grad=True)],
    dims={"M": [4], "N": [32]},
    dtypes=["float32"],
    exact_dims=["N"],
)

embedding_module = opgate.Operator(
    "embedding_module",
    reference=Embedding(50, 16),
    inputs=[opgate.TensorSpec("ids", ("M",), dtype="int64", kind="index", high=50)],
    dims={"M": [8]},
    dtypes=["float32"],
)

step_quantizer = opgate.Operator(
    "step_quantizer",
    reference=LearnedStepQuantizer(),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="uniform", low=-4.0, high=4.0)],
    dims={"M": [4], "N": [32]},
    dtypes=["float32"],
)


@rmsnorm_module.implementation("torch")
def rmsnorm_torch(x):
    weight = torch.linspace(0.5, 1.5, 32, dtype=x.dtype, device=x.device)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


@embedding_module.implementation("torch")
def embedding_torch(ids):
    table = torch.randn(50, 16, generator=torch.Generator().manual_seed(0)).to(ids.device)
    return table[ids] * 2.0


@step_quantizer.implementation("torch")
def step_quantizer_torch(x):
    step = torch.tensor(0.25, dtype=x.dtype, device=x.device)
    return torch.clamp(torch.round(x / step), -128, 127) * step, step.expand(x.shape[0]).clone()
