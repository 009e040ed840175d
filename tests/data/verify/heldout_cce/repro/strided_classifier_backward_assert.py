"""cce_softcap_shift_none.grad FAIL [gradient] on every strided / mixed case: 'raised AssertionError'.
cce_backward.py: `dc = torch.zeros_like(c, dtype=e.dtype); assert dc.stride() == c.stride()`. zeros_like keeps the
strides of a dense tensor (a transposed c passes) but returns a contiguous tensor for a non-dense view, so any
strided classifier (e.g. every other column of a wider weight) raises a bare AssertionError in backward. The
forward accepts the same view and is right. F.cross_entropy(e @ c.T) takes any c.
Run: /work/heldvenv/bin/python repro/strided_classifier_backward_assert.py
"""
import traceback

import _setup  # noqa: F401
import torch
import torch.nn.functional as F
from cut_cross_entropy import linear_cross_entropy

dt = torch.float16
N, V, D = 16, 40, 24
g = torch.Generator().manual_seed(0)
e = torch.randn(N, D, generator=g).to(dt).requires_grad_()
wide = torch.randn(V, 2 * D, generator=g).to(dt)
for name, c in (("contiguous", wide[:, :D].contiguous()), ("transposed", wide[:, :D].contiguous().T.contiguous().T),
                ("strided [:, ::2]", wide[:, ::2])):
    c = c.detach().requires_grad_()
    loss = linear_cross_entropy(e, c, torch.randint(0, V, (N,), generator=g))
    ref = F.cross_entropy((e.detach() @ c.detach().T).float(), torch.zeros(N, dtype=torch.long))  # just to show torch takes it
    try:
        loss.backward()
        print(f"{name:18s} strides {c.stride()}: forward ok, backward ok")
    except AssertionError as exc:
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        print(f"{name:18s} strides {c.stride()}: forward ok ({loss.item():.3f}), backward AssertionError{repr(str(exc)) if str(exc) else ' (no message)'} "
              f"at {tb.filename.split('site-packages/')[-1]}:{tb.lineno}: {tb.line}")
