"""Repro (no opgate; the CPU, and a CUDA GPU where there is one): PyTorch's batch-norm backward on the CPU reads a
non-contiguous weight as if it were contiguous.

    python repro/torch_batch_norm_strided_weight_grad.py

With the weight a strided view (every other element of a buffer), aten.native_batch_norm_backward on the CPU gives
channel c the input gradient that belongs to the buffer's element c, not 2c: channel 1 reads the gap (NaN here),
channel 2 reads channel 1's weight. The forward and the weight and bias gradients are right. Found by opgate on
PyTorch 2.13.0+cpu while judging torch's own batch norm with attorch_batch_norm's spec
(scripts/gpu/torch_batch_norm_spec.py: [gradient] "2 NaN/Inf where the truth is finite" on B = 2, C = 2, its weight
strided); thirty-seventh session. The same on 2.11.0+cu130's CPU kernel; its CUDA kernel is right (H100).
Until it is fixed: weight.contiguous() before F.batch_norm on the CPU.
"""

import torch
import torch.nn.functional as F

print("torch", torch.__version__)
torch.manual_seed(0)
for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
    x = torch.randn(4, 3, device=device, requires_grad=True)
    upstream = torch.randn(4, 3, device=device)
    buffer = torch.full((6,), float("nan"), device=device)
    buffer[::2] = torch.tensor([1.0, 2.0, 3.0], device=device)
    strided = buffer[::2].requires_grad_(True)  # [1, 2, 3], stride 2; the gaps hold NaN
    contiguous = strided.detach().clone().requires_grad_(True)
    bias = torch.zeros(3, device=device, requires_grad=True)
    grads = {}
    for name, weight in (("contiguous", contiguous), ("strided", strided)):
        out = F.batch_norm(x, None, None, weight, bias, training=True)
        grads[name] = torch.autograd.grad(out, (x, weight, bias), upstream)
    dx_right = torch.allclose(grads["contiguous"][0], grads["strided"][0], equal_nan=False)
    print(f"{device}: input gradient of row 0, contiguous weight {grads['contiguous'][0][0].tolist()}")
    print(f"{device}:                          strided weight    {grads['strided'][0][0].tolist()}")
    others_right = all(torch.allclose(a, b) for a, b in zip(grads["contiguous"][1:], grads["strided"][1:]))
    print(f"{device}: input gradient {'right' if dx_right else 'WRONG'} with the strided weight; weight and bias "
          f"gradients {'right' if others_right else 'WRONG'}")
