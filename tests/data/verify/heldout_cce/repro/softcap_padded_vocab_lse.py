"""Library defect found by opgate (cce_softcap_shift_none, forward FAIL in both dtypes, grad failures in the
`large` and `constant_rows` regimes with dtype-independent errors: forward p99.9 3.24, RMSE 0.70 / 0.24).

cce_lse_forward.py masks the vocabulary lanes past V with -inf and THEN soft-caps:
    logits = tl.where(v_mask[None, :], accum, -float("inf"))
    if HAS_SOFTCAP: logits = tl_softcapping(logits, softcap)      # softcap * tanh(-inf) = -softcap
so each padded lane of the last 128-wide vocabulary block enters the log-sum-exp as a phantom logit of -softcap.
When a token's real (soft-capped) logits are near -softcap, the LSE gains log((V + n_pad) / V): with V = 5 and
128-wide blocks, log(128 / 5) = 3.24, exactly opgate's p99.9 error. The backward reuses that LSE, so dE and dC are
wrong too. A vocabulary that is a multiple of 128 (Gemma-2's 256000) has no padded lanes and is exact.
Run: /work/heldvenv/bin/python repro/softcap_padded_vocab_lse.py   (float16; no opgate import)
"""
import math

import _setup  # noqa: F401
import torch
import torch.nn.functional as F
from cut_cross_entropy import linear_cross_entropy

dt = torch.float16
SOFTCAP = 20.0


def truth(e, c, t):
    e = e.double().requires_grad_()
    c = c.double().requires_grad_()
    loss = F.cross_entropy(SOFTCAP * torch.tanh((e @ c.T) / SOFTCAP), t, reduction="none")
    loss.sum().backward()
    return loss.detach(), e.grad, c.grad


for V in (5, 128, 300):
    D, N = 8, 4
    g = torch.Generator().manual_seed(0)
    c = (torch.rand(V, D, generator=g) + 0.5).to(dt)          # positive classifier rows
    e = torch.full((N, D), -8.0).to(dt)                        # every logit ~ -8 * 8 * 1 = -64: soft-capped to ~ -20
    t = torch.randint(0, V, (N,), generator=g)
    ei, ci = e.clone().requires_grad_(), c.clone().requires_grad_()
    got = linear_cross_entropy(ei, ci, t, softcap=SOFTCAP, reduction="none")
    got.sum().backward()
    tl, tde, tdc = truth(e, c, t)
    n_pad = (-V) % 128
    print(f"V={V:4d} (padded lanes {n_pad:3d}): loss cce {got.double().tolist()[:2]} truth {tl.tolist()[:2]}; "
          f"max |loss err| {(got.double() - tl).abs().max():.3f} (log((V+pad)/V) = {math.log((V + n_pad) / V):.3f}); "
          f"max |dE err| {(ei.grad.double() - tde).abs().max():.3e} (|dE| max {tde.abs().max():.2e}); "
          f"max |dC err| {(ci.grad.double() - tdc).abs().max():.3e} (|dC| max {tdc.abs().max():.2e})", flush=True)

print("without softcap, same inputs, V=5:")
V = 5
g = torch.Generator().manual_seed(0)
c = (torch.rand(V, 8, generator=g) + 0.5).to(dt)
e = torch.full((4, 8), -8.0).to(dt)
t = torch.randint(0, V, (4,), generator=g)
got = linear_cross_entropy(e, c, t, reduction="none").double()
ref = F.cross_entropy(e.double() @ c.double().T, t, reduction="none")
print(f"  max |loss err| {(got - ref).abs().max():.3e}")
