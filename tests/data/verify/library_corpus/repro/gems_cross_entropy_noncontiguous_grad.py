"""Repro (no opgate, GPU): FlagGems' cross_entropy_loss cannot backpropagate through non-contiguous logits.

    python repro/gems_cross_entropy_noncontiguous_grad.py      # needs a CUDA GPU and flag_gems 5.0.2

opgate failed gems_cross_entropy.grad `[gradient]` in every dtype on the H200 (2026-12-02) on its strided and
transposed layouts: "raised ValueError: not enough values to unpack (expected 3, got 0)". Cause
(flag_gems/fused/cross_entropy_loss.py): CrossEntropyLoss.forward replaces `inp` by `inp.contiguous()` and then
saves tensors only `if inp.requires_grad`; inside an autograd.Function's forward grad mode is off, so the copy of a
non-contiguous input does not require grad, nothing is saved, and backward's `inp, tgt, weight = ctx.saved_tensors`
raises. A contiguous input is fine.
"""

import torch

import flag_gems

torch.manual_seed(0)
labels = torch.tensor([1, 0, 3], device="cuda")
failed = False
for layout in ("contiguous", "transposed"):
    base = torch.randn(3, 5, device="cuda") if layout == "contiguous" else torch.randn(5, 3, device="cuda").t()
    logits = base.detach().requires_grad_(True)
    loss = flag_gems.cross_entropy_loss(logits, labels, reduction="mean", label_smoothing=0.1)
    want = torch.nn.functional.cross_entropy(logits.detach().double().requires_grad_(True), labels,
                                             label_smoothing=0.1)
    try:
        loss.backward()
        print(f"{layout}: loss {loss.item():.6f} (torch {want.item():.6f}), grad ok, shape {tuple(logits.grad.shape)}")
    except Exception as exc:  # the finding
        failed = True
        print(f"{layout}: loss {loss.item():.6f} (torch {want.item():.6f}), backward raised {type(exc).__name__}: {exc}")
raise SystemExit(1 if failed else 0)
