"""cce_linear_ce.grad (all four checks): warn size_limit, N=0 'raised ZeroDivisionError: division by zero'.
cce.py backward: `grad_scale = 1 / lse.numel()` for reduction="mean". lse has one entry per non-ignored token, so
the same error follows for a batch that is not empty but whose targets all equal ignore_index (a micro-batch of
padding), where F.cross_entropy returns a NaN loss and autograd returns NaN/zero gradients without raising.
Run: /work/heldvenv/bin/python repro/empty_batch_mean_zero_division.py
"""
import _setup  # noqa: F401
import torch
import torch.nn.functional as F
from cut_cross_entropy import linear_cross_entropy

dt = torch.float16
g = torch.Generator().manual_seed(0)
c0 = torch.randn(300, 40, generator=g).to(dt)
for name, N, t in (("empty batch N=0", 0, torch.zeros(0, dtype=torch.long)),
                   ("N=8, all targets -100", 8, torch.full((8,), -100, dtype=torch.long))):
    e = torch.randn(N, 40, generator=g).to(dt).requires_grad_()
    c = c0.clone().requires_grad_()
    ref_e = e.detach().clone().requires_grad_()
    ref = F.cross_entropy((ref_e @ c0.T).float(), t)
    ref.backward()
    loss = linear_cross_entropy(e, c, t)
    try:
        loss.backward()
        res = "backward ok"
    except ZeroDivisionError as exc:
        res = f"backward ZeroDivisionError: {exc}"
    print(f"{name}: torch loss {ref.item()}, backward ok; cce loss {loss.item()}, {res}")
