"""Standalone reproduction (outside opgate) of the size_limit and range_limit WARNs opgate gave on the mamba-ssm
norms and SwiGLU (the manifest expected plain "pass"; these are the deviations it named).

Run:  TRITON_INTERPRET=1 /work/heldvenv/bin/python tests/data/verify/heldout_corpus/repro/size_and_range_limits.py

size_limit: the library raises where the plain-torch reference returns a result:
  - layer_norm_fn / rms_norm_fn / layer_norm_linear_fn at feature dim 65537 (float32: 256 KB per row);
  - layernorm_gated.rmsnorm_fn with group_size 0 (N = 0) and swiglu on a (16, 0) input: empty feature dims.
range_limit: selective_state_update in float16 (opgate: breaks at median |x| >= 2.44e3, promise 1.02e3): the new
  state and output overflow float16 (65504) once state, x, B, C are ~1e3..4e3.
range_limit: layer_norm_fn in float32 at |x| ~ 1e18..1e37 returns finite but wrong values (errors of the size of the
  O(1) outputs: the float32 sum of squares overflows) where the float64 truth is finite.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _mamba_env  # noqa: E402, F401
from mamba_ssm.ops.triton.k_activations import swiglu  # noqa: E402
from mamba_ssm.ops.triton.layer_norm import layer_norm_fn, layer_norm_linear_fn, rms_norm_fn  # noqa: E402
from mamba_ssm.ops.triton.layernorm_gated import rmsnorm_fn  # noqa: E402
from mamba_ssm.ops.triton.selective_state_update import selective_state_update  # noqa: E402


def attempt(name, fn):
    try:
        out = fn()
        out = out[0] if isinstance(out, tuple) else out
        print(f"  {name:58s} returned shape {tuple(out.shape)}, finite: {bool(torch.isfinite(out).all())}")
    except Exception as exc:  # noqa: BLE001  (what the library raises is the finding)
        print(f"  {name:58s} raised {type(exc).__name__}: {str(exc).splitlines()[0][:90]}")


if __name__ == "__main__":
    print("size_limit:")
    x = torch.randn(1, 65537)
    w = torch.ones(65537)
    b = torch.zeros(65537)
    attempt("layer_norm_fn, N=65537 (reference: F.layer_norm works)", lambda: layer_norm_fn(x, w, b, residual=x))
    attempt("rms_norm_fn(prenorm=True), N=65537", lambda: rms_norm_fn(x, w, None, residual=x, prenorm=True))
    attempt("layer_norm_linear_fn, N=65537", lambda: layer_norm_linear_fn(x, w, b, torch.randn(1, 65537), None))
    attempt("reference F.layer_norm, N=65537", lambda: F.layer_norm(x, (65537,), w, b))
    e = torch.randn(16, 0)
    attempt("layernorm_gated.rmsnorm_fn, N=0 (group_size 0)",
            lambda: rmsnorm_fn(e, torch.ones(0), None, z=e, group_size=0, norm_before_gate=False))
    attempt("swiglu on (16, 0)", lambda: swiglu(e))
    attempt("reference silu(x) * y on (16, 0)", lambda: F.silu(e[:, :0]) * e[:, 0:])
    print("range_limit (float32 layer_norm_fn, row of N=1000 values scaled to |x| ~ s; truth is finite):")
    torch.manual_seed(0)
    base = torch.randn(2, 1000)
    for s in (1e4, 1e18, 1e19, 1e20, 1e37):
        xs = base * s
        out = layer_norm_fn(xs, torch.ones(1000), torch.zeros(1000), eps=1e-5)
        truth = F.layer_norm(xs.double(), (1000,), eps=1e-5)
        print(f"  scale {s:7.0e}: finite {bool(torch.isfinite(out).all())}, "
              f"max |err| {(out.double() - truth).abs().max().item():.3g}")
    print("range_limit (float16 selective_state_update, state/x/dt/B/C/z ~ N(0,1) x s; truth computed in float64):")
    g = torch.Generator().manual_seed(0)
    b, H, P, N = 2, 4, 64, 16
    base = [torch.randn(b, H, P, N, generator=g), torch.randn(b, H, P, generator=g), torch.randn(b, H, P, generator=g),
            torch.randn(b, 1, N, generator=g), torch.randn(b, 1, N, generator=g), torch.randn(b, H, P, generator=g)]
    A = -(torch.rand(H, P, N, generator=g) * 15 + 1)
    D = torch.randn(H, P, generator=g)
    dt_bias = -(torch.rand(H, P, generator=g) * 4 + 1)
    for s in (1.0, 100.0, 1000.0, 2440.0):
        st, x, dt, Bm, Cm, z = (t * s for t in base)
        st16, x16, dt16, B16, C16, z16 = (t.half() for t in (st, x, dt, Bm, Cm, z))
        new = st16.clone()
        out = selective_state_update(new, x16, dt16, A, B16, C16, D=D, z=z16, dt_bias=dt_bias, dt_softplus=True)
        d = F.softplus(dt16.double() + dt_bias.double())[..., None]
        ns = st16.double() * torch.exp(d * A.double()) + d * B16.double()[:, :, None, :] * x16.double()[..., None]
        o = ((ns * C16.double()[:, :, None, :]).sum(-1) + D.double() * x16.double()) * F.silu(z16.double())
        ok = lambda got, truth: int((~torch.isfinite(got) & torch.isfinite(truth) & (truth.abs() < 65504)).sum())  # noqa: E731
        print(f"  scale {s:6.0f}: non-finite where the truth fits float16: out {ok(out, o)}, state {ok(new, ns)}; "
              f"max |truth| out {o.abs().max().item():.3g}, state {ns.abs().max().item():.3g}")
