"""Repro (no opgate; a CUDA GPU, or the CPU through Triton's interpreter): attorch 67c2772's BatchNorm1d with its
fused ReLU and residual turns a NaN into 0 and reads its weight and bias as contiguous.

    PYTHONPATH=<attorch> python repro/attorch_batch_norm_relu.py

- relu(BN(x) + r) of a channel holding a NaN is NaN in PyTorch; attorch's fused activation gives 0, so the NaN never
  reaches the loss (opgate's CPU run: [nonfinite] on B = 1, C = 1, L = 2 in the nonfinite regime).
- The weight and bias are loaded with no stride, as the other layers' parameters (repro/attorch_parameter_stride.py):
  a strided weight gives channel 1 the buffer's element 2 (opgate's CPU run: [layout] on B = 1, C = 2, L = 2
  strided). attorch_batch_norm_add_relu, thirty-sixth session.
"""

import warnings

import torch
import torch.nn.functional as F
from _attorch_interpreter import DEVICE, attorch

warnings.filterwarnings("ignore")  # the interpreter's numpy warns on the NaN this repro is about
torch.manual_seed(0)
layer = attorch.BatchNorm1d(2, act_func="relu", device=DEVICE)
x, r = torch.randn(1, 2, 2, device=DEVICE), torch.randn(1, 2, 2, device=DEVICE)


def torch_layer(x, r, w, b):
    return torch.relu(F.batch_norm(x, None, None, w, b, training=True) + r)


def attorch_layer(x, r, w, b):
    return torch.func.functional_call(layer, {"weight": w, "bias": b}, (x,), {"pre_act_add": r})


w, b = torch.ones(2, device=DEVICE), torch.zeros(2, device=DEVICE)
with_nan = x.clone()
with_nan[0, 0, 0] = float("nan")
print("a NaN in channel 0: attorch", attorch_layer(with_nan, r, w, b).tolist())
print("                    torch  ", torch_layer(with_nan, r, w, b).tolist())
ws = torch.tensor([1.0, 9.0, 2.0, 9.0], device=DEVICE)[::2]  # [1, 2], stride 2
bs = torch.tensor([0.1, -9.0, 0.2, -9.0], device=DEVICE)[::2]  # [0.1, 0.2], stride 2
print("strided weight, bias: attorch", attorch_layer(x, r, ws, bs).tolist())
print("                      torch  ", torch_layer(x, r, ws, bs).tolist())
