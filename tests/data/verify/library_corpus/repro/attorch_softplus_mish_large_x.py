"""Repro (no opgate; a CUDA GPU, or the CPU through Triton's interpreter): attorch 67c2772's Softplus overflows and
Mish's gradient breaks for large inputs.

    PYTHONPATH=<attorch> python repro/attorch_softplus_mish_large_x.py

attorch's softplus is log(1 + exp(x)) with no threshold: exp overflows float32 above x ~ 88.7, so Softplus gives
inf where F.softplus (threshold 20: x itself) gives x. Mish's forward is right, but its gradient, built from the
same exponentials, is wrong from x ~ 20 on (a denormal instead of 1) and NaN further up. opgate's regimes with large
values found them as [nonfinite] and [gradient] failures of attorch_softplus and attorch_mish in every dtype on the
H200 (thirty-sixth session).
"""

import warnings

import torch
from _attorch_interpreter import DEVICE, attorch

warnings.filterwarnings("ignore")  # the interpreter's numpy warns on the overflows this repro is about
x = torch.tensor([[1.0, 20.0, 50.0, 89.0, 100.0, 1e4]], device=DEVICE)
print("x                ", x.flatten().tolist())
print("Softplus attorch ", attorch.Softplus()(x).flatten().tolist())
print("         torch   ", torch.nn.functional.softplus(x).flatten().tolist())
mine, theirs = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
attorch.Mish()(mine).sum().backward()
torch.nn.functional.mish(theirs).sum().backward()
print("Mish gradient attorch", mine.grad.flatten().tolist())
print("              torch  ", theirs.grad.flatten().tolist())
