"""Repro (no opgate; a CUDA GPU, or the CPU through Triton's interpreter): attorch 67c2772's LayerNorm, RMSNorm and
NLLLoss read a 1-D parameter as contiguous.

    PYTHONPATH=<attorch> python repro/attorch_parameter_stride.py

Like Linear's bias (repro/attorch_linear_bias_stride.py), the norms' weights and NLLLoss's class weight are loaded
at `pointer + index` with no stride, so a parameter that is a strided view (a slice of a larger tensor, or opgate's
strided and mixed layout cases) is misread. opgate found them on the CPU run of attorch's files (thirty-sixth
session): attorch_layer_norm and attorch_rms_norm [layout] on M = 2, N = 3 mixed; attorch_nll_loss [layout] on
B = 1, C = 2, S = 1 strided (NaN, opgate's poison), and on the H200 on B = 8, C = 21, S = 4096 strided in float32.
"""

import torch
import torch.nn.functional as F
from _attorch_interpreter import DEVICE, attorch

torch.manual_seed(0)
x = torch.randn(2, 3, device=DEVICE)
w = torch.tensor([1.0, 9.0, 2.0, 9.0, 3.0, 9.0], device=DEVICE)[::2]  # [1, 2, 3], stride 2
b = torch.zeros(3, device=DEVICE)
layer = attorch.LayerNorm(3, device=DEVICE)
got = torch.func.functional_call(layer, {"weight": w, "bias": b}, (x,))
print(f"LayerNorm weight {w.tolist()} stride {w.stride()}")
print("  attorch                  ", got.tolist())
print("  torch                    ", F.layer_norm(x, (3,), w, b).tolist())
rms = attorch.RMSNorm(3, eps=1e-6, device=DEVICE)
print("RMSNorm, the same weight")
print("  attorch                  ", torch.func.functional_call(rms, {"weight": w}, (x,)).tolist())
print("  torch                    ", (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w).tolist())

logp = torch.log_softmax(torch.randn(1, 2, 2, device=DEVICE), dim=1)
labels = torch.tensor([[0, 1]], device=DEVICE)  # both classes: the weighted mean depends on the weights
cw = torch.tensor([0.5, 7.0, 2.0, 7.0], device=DEVICE)[::2]  # [0.5, 2.0], stride 2
print(f"NLLLoss class weight {cw.tolist()} stride {cw.stride()}")
print("  attorch                  ", attorch.NLLLoss(weight=cw)(logp, labels).item())
print("  torch                    ", F.nll_loss(logp, labels, weight=cw).item())
print("  attorch, weight contiguous", attorch.NLLLoss(weight=cw.contiguous())(logp, labels).item())
