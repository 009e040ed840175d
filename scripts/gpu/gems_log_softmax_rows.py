"""GPU: the rows behind FlagGems' log_softmax "special mismatches" (gems_log_softmax_check.py, eleventh session):
one row with a NaN, one with +inf, one with -inf, printed beside PyTorch's (CUDA and float64 CPU). No opgate.

    PYTHONPATH=/tmp/site python3 scripts/gpu/gems_log_softmax_rows.py
"""

import torch
import torch.nn.functional as F

import flag_gems

x = torch.tensor([[0.5, float("nan"), 1.0, -2.0],
                  [0.5, float("inf"), 1.0, -2.0],
                  [0.5, float("-inf"), 1.0, -2.0],
                  [float("inf"), float("inf"), 1.0, -2.0]], device="cuda")
want_cpu = torch.log_softmax(x.double().cpu(), dim=-1)
want_cuda = torch.log_softmax(x, dim=-1).cpu()  # PyTorch's own CUDA kernel, before FlagGems replaces it
flag_gems.only_enable(include=["log_softmax", "log_softmax_backward"])  # as the library corpus spec does
got = F.log_softmax(x, dim=-1).cpu()
for row in range(x.shape[0]):
    print("input        ", x[row].tolist())
    print("torch cpu f64", want_cpu[row].tolist())
    print("torch cuda   ", want_cuda[row].tolist())
    print("flag_gems    ", got[row].tolist())
