"""Repro (no opgate; a CUDA GPU, or the CPU through Triton's interpreter): attorch 67c2772's Linear reads its bias as
contiguous.

    PYTHONPATH=<attorch> python repro/attorch_linear_bias_stride.py

linear_forward_kernel loads `bias_pointer + out_feat_offset`; the layer passes the input's, weight's and outputs'
strides but not the bias's. A bias that is a strided view (torch.func.functional_call with a sliced parameter, as
opgate's spec does) is misread: output column j gets the element 2j of the underlying buffer. opgate's strided case
(M = 1, K = 1, N = 2) gave NaN (its poison) at [0, 1] in float16 and bfloat16, forward and gradient, on the H200
(thirty-sixth session).
"""

import torch
from _attorch_interpreter import DEVICE, attorch

torch.manual_seed(0)
x = torch.randn(2, 3, device=DEVICE)
w = torch.randn(3, 2, device=DEVICE) * 0.1  # attorch keeps its weight as [in, out]
b = torch.tensor([0.5, -7.0, 0.25, -7.0], device=DEVICE)[::2]  # [0.5, 0.25], stride 2
layer = attorch.Linear(3, 2, device=DEVICE)
print(f"bias {b.tolist()} stride {b.stride()}")
print("attorch                ", torch.func.functional_call(layer, {"weight": w, "bias": b}, (x,)).tolist())
print("torch                  ", (x @ w + b).tolist())
contiguous = {"weight": w, "bias": b.contiguous()}
print("attorch, contiguous bias", torch.func.functional_call(layer, contiguous, (x,)).tolist())
