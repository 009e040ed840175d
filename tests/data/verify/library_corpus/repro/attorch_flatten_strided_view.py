"""Repro (no opgate; a CUDA GPU, or the CPU through Triton's interpreter): attorch 67c2772's activation and
regression-loss layers read a strided view as contiguous memory.

    PYTHONPATH=<attorch> python repro/attorch_flatten_strided_view.py

ActFuncAutoGrad (act_layers.py) and the p-loss layers (p_loss_layers.py) call input.flatten() and pass the result
to a kernel that indexes it as contiguous. flatten() returns a view where it can: a [1, N] tensor with strides
(S, 2) flattens to a stride-2 view, not a copy, so the kernel reads the neighbouring elements (and, in the
backward, past the end). opgate's strided layout cases (M = 1) found it as [layout], [nonfinite] and [gradient]
failures of attorch_gelu, _mish, _softplus, _leaky_relu, _mse_loss and _huber_loss on the H200 (thirty-sixth
session); the same values made contiguous give the right result.
"""

import torch
from _attorch_interpreter import DEVICE, attorch

torch.manual_seed(0)
base = torch.randn(1, 8, device=DEVICE)
x = base[:, ::2]  # [1, 4], strides (8, 2): a column slice, as a strided layout case
print(f"x strides {x.stride()}; x.flatten() contiguous: {x.flatten().is_contiguous()} (stride {x.flatten().stride()})")

got = attorch.GELU()(x)
want = torch.nn.functional.gelu(x)
print("GELU forward  attorch", [round(v, 4) for v in got.flatten().tolist()])
print("              torch  ", [round(v, 4) for v in want.flatten().tolist()])
print("              attorch on x.contiguous() matches torch:", torch.allclose(attorch.GELU()(x.contiguous()), want))

xa, xt = x.detach().clone().requires_grad_(True), x.detach().clone().requires_grad_(True)
attorch.GELU()(xa).sum().backward()
torch.nn.functional.gelu(xt).sum().backward()
print("GELU gradient attorch", xa.grad.flatten().tolist())
print("              torch  ", [round(v, 4) for v in xt.grad.flatten().tolist()])

a, b = base[:, ::2], torch.randn(1, 8, device=DEVICE)[:, ::2]
print("MSE loss      attorch", attorch.MSELoss()(a, b).item(), " torch", torch.nn.functional.mse_loss(a, b).item())
