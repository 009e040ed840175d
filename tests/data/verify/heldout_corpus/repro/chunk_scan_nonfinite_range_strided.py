"""Standalone reproductions (outside opgate) of opgate's other mamba_chunk_scan findings (mamba_ssm 2.3.2.post1):

1. [nonfinite] (float32, bfloat16): NaN/Inf injected into x, batch=1, L=65, H=1, P=4, N=2: opgate saw NaN where
   the float64 truth is -Inf. Shown with +Inf and -Inf in one column of x: the library's output, the spec's
   quadratic reference in float64 (C.B first, then times x), and the same sum associated as a state recurrence
   (the state B x^T first, then C.state), in float64. The bfloat16 line is void: Triton 3.9's interpreter gets
   tl.dot of bfloat16 operands wrong (repro/interpreter_bf16_dot.py).
2. [range] (float16): NaN where the truth is finite, at inputs scaled to |x| ~ 75 (opgate's bisected 74.5; its
   "large" regime scales float16 inputs by 64). Shown: each input alone scaled by s, and all together, in float16
   against the same values in float32.
3. [gradient] (float32): "raised AssertionError" on a strided case (batch=1, L=1, H=1, P=1, N=1 typical strided).
   Shown: forward and backward with one input at a time a view of last-dim stride 2.

Run:  TRITON_INTERPRET=1 /work/heldvenv/bin/python tests/data/verify/heldout_corpus/repro/chunk_scan_nonfinite_range_strided.py
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _mamba_env  # noqa: E402, F401
from mamba_chunk_ref import chunk_scan_ref  # noqa: E402
from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined  # noqa: E402

CHUNK = 64


def inputs(b, L, H, P, N, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, L, H, P, generator=g).to(dtype)
    dt = torch.randn(b, L, H, generator=g).to(dtype)
    A = -(torch.rand(H, generator=g) * 15 + 1)
    B = torch.randn(b, L, 1, N, generator=g).to(dtype)
    C = torch.randn(b, L, 1, N, generator=g).to(dtype)
    D = torch.randn(H, generator=g)
    dt_bias = -(torch.rand(H, generator=g) * 4 + 1)
    return [x, dt, A, B, C, D, dt_bias]


def lib(x, dt, A, B, C, D, dt_bias):
    return mamba_chunk_scan_combined(x, dt, A, B, C, CHUNK, D=D, dt_bias=dt_bias, dt_softplus=True)


def state_first_f64(x, dt, A, B, C, D, dt_bias):
    """The same scan, associated as a state-space recurrence does: h_t = decay h + dt' B_t x_t^T; y_t = C_t h_t."""
    x, dt, A, B, C, D, dt_bias = (t.double() for t in (x, dt, A, B, C, D, dt_bias))
    step = F.softplus(dt + dt_bias)
    h = torch.zeros(x.shape[0], x.shape[2], B.shape[-1], x.shape[3], dtype=torch.float64)
    ys = []
    for t in range(x.shape[1]):
        h = torch.exp(step[:, t] * A)[..., None, None] * h + (step[:, t, :, None, None] * B[:, t, 0][:, None, :, None]
                                                               * x[:, t][:, :, None, :])
        ys.append(torch.einsum("bn,bhnp->bhp", C[:, t, 0], h) + D[:, None] * x[:, t])
    return torch.stack(ys, 1)


def finding_nonfinite():
    print("1. +Inf at t=10 and -Inf at t=20 in x[..., p=2] (batch=1, L=65, H=1, P=4, N=2), output y[0, 64, 0, 2]:")
    for dtype in (torch.float32, torch.bfloat16):
        for seed in range(200):  # first seed where the float64 truth is +-Inf (both terms of one sign)
            args = inputs(1, 65, 1, 4, 2, dtype, seed=seed)
            args[0][0, 10, 0, 2] = float("inf")
            args[0][0, 20, 0, 2] = float("-inf")
            truth = chunk_scan_ref(*(t.double() for t in args))[0, 64, 0, 2].item()
            if truth in (float("inf"), float("-inf")):
                break
        out = lib(*args)[0, 64, 0, 2].item()
        other = state_first_f64(*args)[0, 64, 0, 2].item()
        print(f"   {str(dtype):15s} seed {seed}: library {out}, quadratic float64 (C.B first: the spec's truth) "
              f"{truth}, state-first float64 (B x^T first) {other}")


def finding_range():
    print("2. float16, inputs scaled by s (x, B, C, dt raw): elements where the float64 truth is finite and inside")
    print("   float16's range (|truth| < 65504) but the output is NaN/Inf; the same values run in float32 beside:")
    base = inputs(1, 99, 1, 4, 2, torch.float32, seed=5)
    for which in ("x,B,C", "dt,B,C", "x,dt", "x,dt,B,C"):
        row = []
        for s in (8, 16, 32, 64, 75):
            args = [t.clone() for t in base]
            for i, n in ((0, "x"), (1, "dt"), (3, "B"), (4, "C")):
                if n in which.split(","):
                    args[i] = args[i] * s
            half = [a.half() if i in (0, 1, 3, 4) else a for i, a in enumerate(args)]
            truth = chunk_scan_ref(*(t.double() for t in half))
            representable = torch.isfinite(truth) & (truth.abs() < 65504)
            out16 = lib(*half)
            out32 = lib(*[a.float() for a in half])
            bad16 = int((~torch.isfinite(out16) & representable).sum())
            bad32 = int((~torch.isfinite(out32) & representable).sum())
            row.append(f"s={s}: fp16 {bad16:3d} fp32 {bad32}")
        print(f"   scaled {which:8s}: " + "; ".join(row) + f"  (of {truth.numel()} elements)")


def finding_strided():
    print("3. one input a view with last-dim stride 2 (wide[..., ::2]), float32, batch=1, L=1, H=1, P=1, N=1:")
    names = ["x", "dt", "A", "B", "C", "D", "dt_bias"]
    for i, name in enumerate(names):
        args = inputs(1, 1, 1, 1, 1, torch.float32)
        wide = torch.zeros(*args[i].shape[:-1], 2 * args[i].shape[-1])
        wide[..., ::2] = args[i]
        args[i] = wide[..., ::2]
        leaves = [a.requires_grad_() for a in args]
        stage = "forward"
        try:
            y = lib(*leaves)
            stage = "backward"
            y.backward(torch.randn_like(y))
            print(f"   {name:8s} strided: forward and backward ok")
        except Exception as exc:  # noqa: BLE001
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            print(f"   {name:8s} strided: {stage} raised {type(exc).__name__} at {Path(frame.filename).name}:"
                  f"{frame.lineno}: {frame.line}")


if __name__ == "__main__":
    finding_nonfinite()
    finding_range()
    finding_strided()
