"""Repro (no opgate; a CUDA GPU, or the CPU through Triton's interpreter): attorch 67c2772's CrossEntropyLoss reads
the target as contiguous.

    PYTHONPATH=<attorch> python repro/attorch_cross_entropy_target_stride.py

cross_entropy_loss_forward_kernel loads `target_pointer + batch_offset` and the layer passes only the input's
strides, so a target that is a strided view (a column of a [M, k] label tensor) is misread: each row takes another
row's class. opgate's strided layout case (M = 2, V = 1, whose labels' neighbours are opgate's int64 poison) gave
-1.35 where the truth is 0 in float16 and bfloat16 on the H200 (thirty-sixth session); here the neighbours are
other valid classes, so the loss is plausible and wrong.
"""

import torch
from _attorch_interpreter import DEVICE, attorch

torch.manual_seed(0)
logits = torch.randn(2, 3, device=DEVICE)
labels = torch.tensor([0, 2, 1, 2], device=DEVICE)[::2]  # [0, 1], stride 2
print(f"labels {labels.tolist()} stride {labels.stride()}")
print("attorch                    ", attorch.CrossEntropyLoss()(logits, labels).item())
print("torch                      ", torch.nn.functional.cross_entropy(logits, labels).item())
print("attorch, labels.contiguous()", attorch.CrossEntropyLoss()(logits, labels.contiguous()).item())
