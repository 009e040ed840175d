"""Standalone check (outside opgate) of opgate's FAIL [precision] on mamba_selective_state_update in float32 (1/65
cases, batch=13, H=7, P=17, N=7, "large" regime: new state element error 0.0247 > its componentwise budget 0.00333).

Run:  TRITON_INTERPRET=1 /work/heldvenv/bin/python tests/data/verify/heldout_corpus/repro/selective_state_update_softplus_fp32.py

mamba_ssm 2.3.2.post1 computes dt_softplus as log(exp(dt) + 1) under Triton >= 3 (ops/triton/softplus.py), not
log1p(exp(dt)); for dt well below 0 the 1 + exp(dt) rounds in float32 and the step dt' = softplus(dt + dt_bias)
loses relative precision ~ 2^-24 / exp(dt). Isolated here: state 0, B = C = x = 1, D = 0, z large, so the new
state equals dt' exactly; relative error of the library's dt' against float64, beside torch's float32 F.softplus.
Mamba2 initialises dt_bias to softplus^-1 of [0.001, 0.1], i.e. dt + dt_bias around -7 to -2 at the start of
training.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _mamba_env  # noqa: E402, F401
from mamba_ssm.ops.triton.selective_state_update import selective_state_update  # noqa: E402

if __name__ == "__main__":
    batch, H, P, N = 1, 1, 64, 1
    print("dt + dt_bias   library dt' rel. err (max over 64)   F.softplus float32 rel. err   float32 eps 6e-8")
    for arg in (-1.0, -2.0, -4.0, -7.0, -10.0, -15.0):
        dt = torch.full((batch, H, P), arg) + torch.linspace(0, 0.1, P)  # 64 values near arg
        state = torch.zeros(batch, H, P, N)
        A = -torch.ones(H, P, N) * 1e-30  # exp(dt' A) = 1: the new state is dt' B x
        ones = torch.ones(batch, 1, N)
        x = torch.ones(batch, H, P)
        selective_state_update(state, x, dt, A, ones, ones, D=torch.zeros(H, P), z=None, dt_bias=torch.zeros(H, P),
                               dt_softplus=True)
        truth = F.softplus(dt.double())
        lib_err = ((state[..., 0].double() - truth) / truth).abs().max().item()
        torch_err = ((F.softplus(dt).double() - truth) / truth).abs().max().item()
        print(f"{arg:13.1f}   {lib_err:33.3g}   {torch_err:27.3g}")
