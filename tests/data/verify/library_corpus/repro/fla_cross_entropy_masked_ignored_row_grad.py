"""Repro (no opgate): fla's fused cross-entropy returns a NaN gradient for an IGNORED row that ends in masked logits.

    TRITON_INTERPRET=1 python repro/fla_cross_entropy_masked_ignored_row_grad.py   # CPU; on a GPU drop TRITON_INTERPRET

opgate's `masked` regime (whole runs of -inf, as attention/vocab masks make them) at V = 65537 found it (case
M=3,V=65537 seed=53 masked: row 1 is ignored and its logits 32769..65536 are -inf): the gradient of
fla.modules.fused_cross_entropy.cross_entropy_loss is NaN on every element of a row whose label is ignore_index
(-100) and whose last logits are -inf, although half its logits are finite. The row takes no part in
the loss, so its gradient must be 0, and PyTorch's F.cross_entropy gives 0 there. A NaN gradient of an ignored row
reaches the weights through the logits' matmul backward (0 x NaN = NaN). A row whose logits are ALL -inf is
printed too: there PyTorch's own gradient is NaN as well (not a contract anyone keeps).
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
from fla.modules.fused_cross_entropy import cross_entropy_loss  # noqa: E402

device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
for vocab, first_masked in ((65537, 32769), (65537, 65536), (65537, 0), (1000, 500)):
    logits = torch.randn(3, vocab, device=device)
    logits[1, first_masked:] = float("-inf")  # row 1: its logits from `first_masked` on
    labels = torch.tensor([2, -100, 5], device=device)  # ... and ignored
    x = logits.clone().requires_grad_(True)
    loss, _ = cross_entropy_loss(x, labels, label_smoothing=0.1, ignore_index=-100)
    loss.sum().backward()
    ref = logits.clone().requires_grad_(True)
    F.cross_entropy(ref, labels, reduction="none", label_smoothing=0.1, ignore_index=-100).sum().backward()
    print(f"V={vocab}, masked from {first_masked}: fla loss row 1 = {float(loss[1])}, fla grad row 1 NaN: {int(x.grad[1].isnan().sum())}/{vocab}; "
          f"torch grad row 1 NaN: {int(ref.grad[1].isnan().sum())}, max |grad| {float(ref.grad[1].abs().max())}; "
          f"other rows agree: {bool(torch.allclose(x.grad[[0, 2]], ref.grad[[0, 2]], atol=1e-6))}")
