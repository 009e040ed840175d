"""Standalone reproduction (outside opgate) of opgate's FAIL [precision] on mamba_layer_norm_residual.grad in
float16/bfloat16: mamba_ssm 2.3.2.post1 layer_norm_fn(x, w, b, residual=r) with half-precision x and r.

Run:  TRITON_INTERPRET=1 /work/heldvenv/bin/python tests/data/verify/heldout_corpus/repro/layer_norm_residual_half_grad.py

Rows whose x + r is constant (zero variance, so rstd = 1/sqrt(eps) = 316): dx of the library against the float64
truth of the same (rounded) inputs, beside PyTorch eager in the same dtype. Three ways of calling the library:
no residual (x + r added beforehand), the residual in the dtype under test (the spec's call; residual_in_fp32 does
not change it, the residual's own dtype is kept), and the residual passed as a float32 tensor.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _mamba_env  # noqa: E402, F401
from mamba_ssm.ops.triton.layer_norm import layer_norm_fn  # noqa: E402

EPS = 1e-5


def run(dtype: torch.dtype, n: int, mode: str) -> str:
    torch.manual_seed(0)
    x = torch.tensor([1.1, 3.3, 100.3])[:, None].expand(3, n).to(dtype)  # x + r = c per row, exactly
    r = torch.full((3, n), -0.1).to(dtype)
    w = (torch.rand(n) + 0.5).to(dtype)
    b = torch.randn(n).to(dtype)
    dy = torch.randn(3, n).to(dtype)

    xt = x.double().requires_grad_()  # truth: float64 on the same rounded values
    F.layer_norm(xt + r.double(), (n,), w.double(), b.double(), EPS).backward(dy.double())
    xe = x.clone().requires_grad_()   # eager in the dtype under test
    F.layer_norm(xe + r, (n,), w, b, EPS).backward(dy)

    xl = x.clone().requires_grad_()
    if mode == "no residual":
        out = layer_norm_fn(xl + r, w, b, eps=EPS)
    elif mode == "residual (dtype)":
        out = layer_norm_fn(xl, w, b, residual=r, eps=EPS)
    elif mode == "residual (dtype), residual_in_fp32":
        out = layer_norm_fn(xl, w, b, residual=r, eps=EPS, residual_in_fp32=True)
    else:  # "residual (float32 tensor)"
        out = layer_norm_fn(xl, w, b, residual=r.float(), eps=EPS)
    out.backward(dy)
    err = lambda g: (g.double() - xt.grad).abs().max().item()  # noqa: E731
    return (f"{str(dtype):15s} N={n:5d} {mode:36s} |truth dx| max {xt.grad.abs().max().item():9.3g}   "
            f"eager err {err(xe.grad):9.3g}   mamba err {err(xl.grad):9.3g}")


if __name__ == "__main__":
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for n in (1, 2560):
            for mode in ("no residual", "residual (dtype)", "residual (dtype), residual_in_fp32",
                         "residual (float32 tensor)"):
                print(run(dtype, n, mode))
