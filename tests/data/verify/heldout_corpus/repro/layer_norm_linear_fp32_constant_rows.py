"""Standalone check (outside opgate) of opgate's FAIL [precision] on mamba_layer_norm_linear in float32: smallest
failing case M=1, N=7, O=16, a constant row (constant_rows regime): RMSE 1.38e-06 > budget 7.54e-07, worst element
got -0.187492, truth -0.187495.

Run:  TRITON_INTERPRET=1 /work/heldvenv/bin/python tests/data/verify/heldout_corpus/repro/layer_norm_linear_fp32_constant_rows.py

For rows x = c (constant, N = 7) and random c, norm weights and Linear (16 x 7): the error against the float64 truth
of (1) mamba_ssm's layer_norm_linear_fn, (2) mamba_ssm's layer_norm_fn then F.linear (same LayerNorm kernel),
(3) PyTorch eager on the CPU in float32 (its reductions accumulate in double), and (4) a textbook float32 LayerNorm
(mean and variance summed in float32, left to right, as a GPU kernel would) then F.linear. In a zero-variance row
the normalised value is (x - mean) * rstd with rstd = 1/sqrt(eps) = 316: a mean one float32 ulp off becomes
316 ulp of error in x_hat, in any float32 implementation whose mean is not exact.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _mamba_env  # noqa: E402, F401
from mamba_ssm.ops.triton.layer_norm import layer_norm_fn, layer_norm_linear_fn  # noqa: E402

EPS = 1e-5
N, O = 7, 16


def textbook_fp32_layer_norm(x, w, b):
    mean = torch.zeros(x.shape[0], 1)
    for j in range(x.shape[1]):  # float32 sum, left to right
        mean = mean + x[:, j:j + 1]
    mean = mean / x.shape[1]
    centred = x - mean
    var = torch.zeros(x.shape[0], 1)
    for j in range(x.shape[1]):
        var = var + centred[:, j:j + 1] * centred[:, j:j + 1]
    rstd = torch.rsqrt(var / x.shape[1] + EPS)
    return centred * rstd * w + b


def rmse(a, truth):
    return (a.double() - truth).pow(2).mean().sqrt().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    rows = {"mamba layer_norm_linear_fn": [], "mamba layer_norm_fn + F.linear": [], "eager CPU float32": [],
            "textbook float32 LN + F.linear": []}
    for trial in range(200):
        c = torch.randn(1, 1) * 2
        x = c.expand(1, N).contiguous()
        w = torch.rand(N) + 0.5
        b = torch.randn(N)
        W = (torch.rand(O, N) - 0.5) * 0.1
        bias = torch.randn(O)
        truth = F.linear(F.layer_norm(x.double(), (N,), w.double(), b.double(), EPS), W.double(), bias.double())
        rows["mamba layer_norm_linear_fn"].append(rmse(layer_norm_linear_fn(x, w, b, W, bias, eps=EPS), truth))
        rows["mamba layer_norm_fn + F.linear"].append(rmse(F.linear(layer_norm_fn(x, w, b, eps=EPS), W, bias), truth))
        rows["eager CPU float32"].append(rmse(F.linear(F.layer_norm(x, (N,), w, b, EPS), W, bias), truth))
        rows["textbook float32 LN + F.linear"].append(rmse(F.linear(textbook_fp32_layer_norm(x, w, b), W, bias), truth))
    print(f"constant rows x = c, c ~ N(0, 4), N={N}, O={O}, 200 trials; RMSE against the float64 truth")
    for name, errs in rows.items():
        e = torch.tensor(errs)
        print(f"  {name:32s} median {e.median().item():9.3g}  max {e.max().item():9.3g}  "
              f"trials with RMSE > 7.54e-07 (opgate's budget in its failing case): {(e > 7.54e-7).sum().item():3d}/200")
