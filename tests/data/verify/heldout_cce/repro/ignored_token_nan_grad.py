"""cce_softcap_shift_none.grad, `nonfinite` case (both dtypes): opgate reports 63 dE elements (one row of D = 63)
'where the truth is NaN/Inf ... and the result is not the same'. Hypothesis checked here: the NaN that opgate
injects into e lands on a token whose target is ignored (ignore_index = 0, V = 5: one in five). Autograd of the
reference (F.cross_entropy(..., ignore_index=0)) gives that token a NaN gradient (log_softmax's backward forms
0 * NaN), and the NaN spreads into every dC element through dlogits^T @ e, although an ignored token's loss is 0 and
its true derivative is 0. cut-cross-entropy skips ignored tokens (`valids`), so its gradient stays finite: the
documented meaning ("it is ignored in the loss computation"), not a library defect.
Run: /work/heldvenv/bin/python repro/ignored_token_nan_grad.py
"""
import _setup  # noqa: F401
import torch
import torch.nn.functional as F
from cut_cross_entropy import linear_cross_entropy

dt = torch.float16
B, T, V, D = 2, 9, 5, 63
g = torch.Generator().manual_seed(0)
e0 = torch.randn(B, T, D, generator=g).to(dt)
c0 = torch.randn(V, D, generator=g).to(dt)
t = torch.randint(1, V, (B, T), generator=g)
t[0, 4] = 0                 # target of e[0, 3] (shift) is ignored
e0[0, 3, 7] = float("nan")  # NaN in the ignored token's embedding

e = e0.double().requires_grad_()
c = c0.double().requires_grad_()
lg = 20 * torch.tanh((e[:, :-1] @ c.T) / 20)
ref = F.cross_entropy(lg.reshape(-1, V), t[:, 1:].reshape(-1), ignore_index=0, reduction="none")
ref.sum().backward()
print("reference loss finite:", bool(torch.isfinite(ref).all()), "| reference dE NaN elements:", int(e.grad.isnan().sum()),
      "(row e[0,3]:", int(e.grad[0, 3].isnan().sum()), ") | reference dC NaN elements:", int(c.grad.isnan().sum()), "of", c.grad.numel())
ei, ci = e0.clone().requires_grad_(), c0.clone().requires_grad_()
got = linear_cross_entropy(ei, ci, t, ignore_index=0, softcap=20.0, reduction="none", shift=True)
got.double().sum().backward()
print("cce loss finite:", bool(torch.isfinite(got).all()), "| cce dE NaN:", int(ei.grad.isnan().sum()),
      "dE row e[0,3] all zero:", bool((ei.grad[0, 3] == 0).all()), "| cce dC NaN:", int(ci.grad.isnan().sum()))
