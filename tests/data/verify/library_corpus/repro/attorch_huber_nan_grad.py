"""Repro (no opgate; a CUDA GPU, or the CPU through Triton's interpreter): attorch 67c2772's HuberLoss gradient is
finite at a NaN input.

    PYTHONPATH=<attorch> python repro/attorch_huber_nan_grad.py

PyTorch's huber_loss backward gives NaN where the input is NaN (the forward is NaN too); attorch's p-loss backward
kernel picks the clipped branch for NaN (-delta), so a NaN that reaches the loss leaves a finite, plausible
gradient: the divergence is hidden from the optimizer. opgate's nonfinite regime found it as a [gradient] failure
in every dtype on the H200 (M = N = 1: got 0.0393, truth NaN; thirty-sixth session).
"""

import torch
from _attorch_interpreter import DEVICE, attorch

target = torch.tensor([[0.3]], device=DEVICE)
mine = torch.tensor([[float("nan")]], device=DEVICE, requires_grad=True)
attorch.HuberLoss()(mine, target).backward()
theirs = torch.tensor([[float("nan")]], device=DEVICE, requires_grad=True)
torch.nn.functional.huber_loss(theirs, target).backward()
print("gradient at a NaN input: attorch", mine.grad.item(), " torch", theirs.grad.item())
