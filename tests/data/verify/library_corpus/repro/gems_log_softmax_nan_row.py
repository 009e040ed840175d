"""Repro (no opgate, GPU): FlagGems' log_softmax drops a NaN of its row instead of propagating it.

    python repro/gems_log_softmax_nan_row.py      # needs a CUDA GPU and flag_gems 5.0.2

opgate's `nonfinite` regime (a NaN, a +inf and a -inf planted in a few rows) failed gems_log_softmax in float32,
float16 and bfloat16 on the H200 (tenth session; that report was lost, so the class was not read from it). This
reproduction, run on the H200 on 2026-12-02 (torch 2.11.0+cu130, Triton 3.6.0, flag_gems 5.0.2), shows the cause:
for a row with one NaN, PyTorch (CPU in float64, and its own CUDA kernel) returns NaN for the whole row, as the
softmax of a row with a NaN is undefined; FlagGems returns NaN only at the NaN and, elsewhere, the log-softmax of the
row without it:

    input         [0.5, nan, 1.0, -2.0]
    torch cpu f64 [nan, nan, nan, nan]
    torch cuda    [nan, nan, nan, nan]
    flag_gems     [-1.0045969486236572, nan, -0.5045968890190125, -3.5045969486236572]

Rows with +inf, with -inf and with two +inf agree with PyTorch. A NaN in the logits (an overflowed activation, a
0/0 upstream) then passes through FlagGems' log_softmax as plausible finite log-probabilities for the other
classes: the loss stays finite and the NaN that should stop training is hidden.
"""

import torch
import torch.nn.functional as F

import flag_gems

x = torch.tensor([[0.5, float("nan"), 1.0, -2.0]], device="cuda")
want = torch.log_softmax(x, dim=-1).cpu()  # PyTorch's CUDA kernel, before FlagGems replaces it
flag_gems.only_enable(include=["log_softmax", "log_softmax_backward"])  # as the library corpus spec does
got = F.log_softmax(x, dim=-1).cpu()
print("torch    ", want.tolist())
print("flag_gems", got.tolist())
finite_where_nan = int((want.isnan() & ~got.isnan()).sum())
print(f"{finite_where_nan} element(s) finite where PyTorch returns NaN")
raise SystemExit(1 if finite_where_nan else 0)
