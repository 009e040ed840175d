"""Repro (no opgate; a CUDA GPU): the input gradient of a training-mode BatchNorm1d over a batch of 2, in float32,
attorch 67c2772 beside PyTorch's own CUDA kernel, against float64.

    PYTHONPATH=<attorch> python repro/attorch_batch_norm_two_rows_grad.py

opgate failed attorch_batch_norm.grad's float32 check [gradient] on B = 2, C = 1 (contiguous): dx 1.21569e-06 against
a truth of 1.17255e-06 (RMSE 3.47e-08, budget 1.31e-08; H100, thirty-seventh session). Over a batch of two, x_hat is
+-sqrt(var / (var + eps)), and dx = w / sqrt(var + eps) * (g - mean(g) - x_hat * mean(g * x_hat)) cancels down to
eps / (var + eps) of its terms: float32 keeps about 6e-8 / 1e-5 of it. Whether that is attorch's defect or any
float32 kernel's lot is what PyTorch's CUDA kernel, run on the same values, says.

H100, thirty-seventh session, worst |error| / max |dx| over 20 seeds (attorch, PyTorch CUDA float32):
B = 2, C = 1: 5.95e-01, 2.11e-01; B = 2, C = 64: 3.27e-02, 1.85e-03; B = 3, C = 1: 5.50e-06, 5.00e-06;
B = 31, C = 64: 1.98e-07, 2.36e-07. At a batch of two every float32 kernel loses most digits, attorch 3-18x more than
PyTorch; opgate's budgets pass PyTorch's kernel on the same spec (scripts/gpu/torch_batch_norm_spec.py, 49/49 cases).
"""

import torch
import torch.nn.functional as F
from _attorch_interpreter import DEVICE, attorch

if DEVICE != "cuda":
    raise SystemExit("needs a CUDA GPU: attorch's BatchNorm1d makes a CUDA tensor in every call without a residual")
EPS = 1e-5


def input_gradient(x, w, b, g, layer=None):
    x = x.clone().requires_grad_(True)
    if layer is None:
        out = F.batch_norm(x, None, None, w, b, training=True, eps=EPS)
    else:
        out = torch.func.functional_call(layer, {"weight": w, "bias": b}, (x,))
    (dx,) = torch.autograd.grad(out, x, g)
    return dx


for batch, channels in [(2, 1), (2, 64), (3, 1), (31, 64)]:
    worst = {"attorch": 0.0, "torch": 0.0}
    scale = 0.0
    for seed in range(20):
        gen = torch.Generator().manual_seed(seed)
        x = torch.rand(batch, channels, generator=gen, dtype=torch.float64) * 4 - 1
        w = torch.rand(channels, generator=gen, dtype=torch.float64) + 0.5
        b = torch.randn(channels, generator=gen, dtype=torch.float64)
        g = torch.randn(batch, channels, generator=gen, dtype=torch.float64)
        truth = input_gradient(x, w, b, g)
        scale = max(scale, float(truth.abs().max()))
        args = [t.float().to(DEVICE) for t in (x, w, b, g)]
        layer = attorch.BatchNorm1d(channels, eps=EPS, device=DEVICE)
        for name, got in (("attorch", input_gradient(*args, layer=layer)), ("torch", input_gradient(*args))):
            error = float((got.double().cpu() - truth).abs().max() / truth.abs().max())
            worst[name] = max(worst[name], error)
    print(f"B={batch:>3} C={channels:>3}  max |dx| {scale:.2e}  worst error / max |dx| over 20 seeds: "
          f"attorch {worst['attorch']:.2e}, torch CUDA float32 {worst['torch']:.2e}")
