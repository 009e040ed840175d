"""Repro of opgate's FAIL [gradient] on fla_rms_norm_gated.grad float16 (case M=1,N=3 seed=14 huge contiguous).

    TRITON_INTERPRET=1 python repro/fla_rms_norm_gated_fp16_grad.py      # CPU; on a GPU drop TRITON_INTERPRET

Hand-written inputs of the same kind (one row of 3, |x| in the hundreds to thousands: opgate's "huge" regime;
opgate bisected the failure to |x| >= 383). Prints fla's float16 gradients against autograd of the float64
reference on the same float16 inputs, in float16 ulps, and what PyTorch's float16 eager autograd of the reference
(opgate's baseline) gives on the same inputs.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _corpus_env import interpreter_autotune_first_config  # noqa: E402

interpreter_autotune_first_config()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from fla.modules.fused_norm_gate import rms_norm_gated  # noqa: E402

EPS = 1e-5


def ref(x, g, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w * F.silu(g)


def ulps16(a, truth):
    """|a - truth| in units of the float16 spacing at truth."""
    t16 = truth.to(torch.float16).double()
    spacing = (torch.nextafter(t16.abs().to(torch.float16), torch.tensor(float("inf"), dtype=torch.float16))
               .double() - t16.abs())
    return ((a.double() - truth).abs() / spacing)


x = torch.tensor([[1500.0, -383.0, 720.0]], dtype=torch.float16)
g = torch.tensor([[0.75, -1.25, 2.0]], dtype=torch.float16)
w = torch.tensor([0.9, 1.3, 0.6], dtype=torch.float16)
dy = torch.tensor([[0.5, -1.0, 0.25]], dtype=torch.float16)

# truth: float64 autograd on the float16 values
xs = [t.double().requires_grad_() for t in (x, g, w)]
truth = torch.autograd.grad(ref(*xs), xs, dy.double())

# fla, float16
xf = [t.clone().requires_grad_() for t in (x, g, w)]
out = rms_norm_gated(xf[0], xf[1], xf[2], None, activation="swish", eps=EPS)
got = torch.autograd.grad(out, xf, dy)

# PyTorch float16 eager autograd of the same reference (opgate's baseline)
xe = [t.clone().requires_grad_() for t in (x, g, w)]
base = torch.autograd.grad(ref(*xe), xe, dy)

for name, t, c, b in zip(("dx", "dg", "dw"), truth, got, base):
    print(f"{name}: truth {t.tolist()}")
    print(f"    fla fp16  {c.double().tolist()}  |err| max {float((c.double() - t).abs().max()):.3g}, "
          f"max {float(ulps16(c, t).max()):.2f} fp16 ulps, equals round-to-fp16(truth): "
          f"{bool((c == t.to(torch.float16)).all())}")
    print(f"    eager fp16 {b.double().tolist()}")
print("fp16 x.pow(2) of the row:", x.pow(2).tolist(), "(float16 max is 65504)")
