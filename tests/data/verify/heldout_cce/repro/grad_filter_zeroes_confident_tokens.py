"""Reproduces opgate's FAIL of cce_linear_ce.grad / cce on an H100 (bfloat16, N=1, V=2, D=6, typical regime: dE and
dC returned exactly 0 where the float64 truth is up to 8.8e-5; float16 failed too, N=1, V=299, D=7; both cases pass
with filter_eps=None, and on the CPU the checks never ran them: the time budget capped them; `opgate verify --replay`
of the bfloat16 case fails the same on the CPU). Gradient filtering (filter_eps "high", the default) skips a block of
(token, vocabulary) entries when every |softmax - onehot| there is below eps(dtype)/32 (3.1e-5 in float16). When every token is that confident, every block is skipped and the whole gradient is 0, though its true
value is far above bfloat16's range floor: the README's "below numerical precision" holds for an entry's share of
an O(1) gradient, not for a gradient that is small everywhere (a small batch of confident tokens).

Measured: over seeds, N=1, V=2, D=6, normal inputs (std 3, targets the confident class) in float16 (bfloat16 Triton
kernels return garbage under the bare CPU interpreter: opgate repairs that, this script does not): the largest |dE|
of the float64 truth and of each implementation, and whether the implementation's dE is all zero.
Run: python repro/grad_filter_zeroes_confident_tokens.py   (CPU: Triton's interpreter; a GPU gives the same zeros)
"""
import _setup  # noqa: F401
import torch
import torch.nn.functional as F
from cut_cross_entropy import linear_cross_entropy

dt = torch.float16
N, V, D = 1, 2, 6
for seed in range(8):
    g = torch.Generator().manual_seed(seed)
    e0 = (torch.randn(N, D, generator=g, dtype=torch.float64) * 3).to(dt)
    c0 = (torch.randn(V, D, generator=g, dtype=torch.float64) * 3).to(dt)
    t = (e0.double() @ c0.double().T).argmax(-1)  # the confident class is the target
    e = e0.double().requires_grad_()
    c = c0.double().requires_grad_()
    F.cross_entropy(e @ c.T, t).backward()
    p_other = torch.softmax(e0.double() @ c0.double().T, -1).min().item()
    out = {}
    for name, fn in (("cce", lambda a, b: linear_cross_entropy(a, b, t)),
                     ("cce_nofilter", lambda a, b: linear_cross_entropy(a, b, t, filter_eps=None)),
                     ("eager", lambda a, b: F.cross_entropy((a @ b.T).float(), t))):
        a = e0.clone().requires_grad_()
        b = c0.clone().requires_grad_()
        fn(a, b).backward()
        out[name] = (a.grad.double().abs().max().item(), bool((a.grad == 0).all()))
    print(f"seed {seed}: softmax of the other class {p_other:.2e}; max |dE| truth {e.grad.abs().max().item():.2e}, "
          + ", ".join(f"{k} {v[0]:.2e}{' (all 0)' if v[1] else ''}" for k, v in out.items()), flush=True)
