"""Repro (no opgate; a CUDA GPU): attorch 67c2772's weighted-mean NLLLoss in float32 on one long spatial row, per
autotune config.

    PYTHONPATH=<attorch> python repro/attorch_nll_loss_long_row.py

opgate failed attorch_nll_loss's float32 check [precision] at B = 1, C = 1, S = 32767, seed 41, on the H200 (6.00795
against 6.00788, 1.2e-5 relative, budget 1.25e-6). Its numerics check runs one of the kernel's autotune configs per
key, and at that key it ran num_warps=1: attorch's forward kernel reduces the whole row in one Triton block
(BLOCK_SIZE_SPATIAL = next_power_of_2(S) = 32768), so one warp holds 1024 elements a thread. This runs the forward
kernel with each config forced (the autotuner then has one config and does not benchmark), on rows drawn as the spec
draws them (log-probabilities uniform in [-12, 0], C = 1), and prints the relative error against float64 beside
PyTorch's float32 F.nll_loss. The interpreter reduces with numpy, so this needs a GPU.
"""

import sys
import time

import torch
import torch.nn.functional as F
import triton
from _attorch_interpreter import DEVICE, attorch
from attorch import nll_loss_kernels

if DEVICE != "cuda":
    raise SystemExit("needs a CUDA GPU: the interpreter reduces with numpy")
WARPS = [int(w) for w in sys.argv[1:]] or [16, 1]
kernel = nll_loss_kernels.nll_loss_forward_kernel
print(f"{'warps':>5} {'S':>6}  attorch rel. error per seed (0-4)                       torch float32 (max)  compile+run s")
for warps in WARPS:
    kernel.configs = [triton.Config({}, num_warps=warps)]
    kernel.cache.clear()
    for spatial in (32767, 32768):
        began = time.perf_counter()
        ours, theirs = [], []
        for seed in range(5):
            generator = torch.Generator().manual_seed(seed)
            x = torch.rand(1, 1, spatial, generator=generator) * -12.0
            labels = torch.zeros(1, spatial, dtype=torch.long)
            w = 0.5 + 1.5 * torch.rand(1, generator=generator)
            truth = F.nll_loss(x.double(), labels, weight=w.double()).item()
            x, labels, w = x.to(DEVICE), labels.to(DEVICE), w.to(DEVICE)
            ours.append(abs(attorch.NLLLoss(weight=w)(x, labels).item() - truth) / abs(truth))
            theirs.append(abs(F.nll_loss(x, labels, weight=w).item() - truth) / abs(truth))
        print(f"{warps:>5} {spatial:>6}  {' '.join(f'{e:.1e}' for e in ours):<55} {max(theirs):.1e}"
              f"{time.perf_counter() - began:>15.1f}", flush=True)
