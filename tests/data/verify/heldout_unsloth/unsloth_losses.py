"""Held-out corpus: unsloth 2026.10.9 Triton cross-entropy (unsloth.kernels.cross_entropy_loss), forward and gradient.

fast_cross_entropy_loss(logits, labels, logit_softcapping=0, logit_scaling=0, n_items=None) takes logits of shape
(batch, seq_len, vocab) and labels (batch, seq_len) (its docstring) and returns the sum of the per-token losses
divided by n_items, by default the number of labels that are not -100 (ignored tokens: no loss, no gradient); with
no labelled token at all it returns 0 with zero gradients (its comment: "loss 0 and zero grads, not 0 / 0 = NaN").
Here every third token is ignored (labels.view(-1)[::3] = -100), and labels meet the argmax of their logits half
the time (opgate's default for an index input beside logits).

- unsloth_cross_entropy: the plain loss (Llama, Mistral, Qwen); gradient for the logits.
- unsloth_cross_entropy_softcap: logit_softcapping=30, Gemma-2's final-logit soft-capping: the logits become
  30 tanh(logits / 30) before the cross-entropy; gradient for the logits.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import opgate

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the spec's folder: _unsloth_env.py
import _unsloth_env  # noqa: E402, F401  (bare unsloth packages and interpreter shims on a CPU machine)
from unsloth.kernels.cross_entropy_loss import fast_cross_entropy_loss  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16"]
SOFTCAP = 30.0


def every_third_token_ignored(labels):
    # contiguous first: clone() keeps a transposed tensor's strides, and view(-1) then raises (the first run's
    # spec bug, RESULTS.md); the library is handed contiguous labels, as a model's shifted labels are.
    labels = labels.contiguous().clone()
    labels.view(-1)[::3] = -100
    return labels


def _mean_ce(logits, labels):
    """Sum of the token losses over the labelled tokens / their count (1 when there are none)."""
    labels = every_third_token_ignored(labels)
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100,
                            reduction="sum")
    return total / max(int((labels != -100).sum()), 1)


# ---------------------------------------------------------------- plain cross-entropy
unsloth_cross_entropy = opgate.Operator(
    "unsloth_cross_entropy",
    reference=_mean_ce,
    inputs=[
        opgate.TensorSpec("logits", ("B", "S", "V"), kind="logits", requires_grad=True),
        opgate.TensorSpec("labels", ("B", "S"), dtype="int64", kind="index", high="V"),
    ],
    dims={"B": [2, 1], "S": [4, 3], "V": [32000, 70001]},  # V: Llama-2's vocabulary; one past 65536
    dtypes=DTYPES,
    perf_dims={"B": 4, "S": 2048, "V": 128256},
)


@unsloth_cross_entropy.implementation("unsloth_fast_cross_entropy_loss", backend="triton")
def _unsloth_ce(logits, labels):
    return fast_cross_entropy_loss(logits, every_third_token_ignored(labels))


# ---------------------------------------------------------------- Gemma-2 soft-capped cross-entropy
def _softcap_ce_ref(logits, labels):
    return _mean_ce(SOFTCAP * torch.tanh(logits / SOFTCAP), labels)


unsloth_cross_entropy_softcap = opgate.Operator(
    "unsloth_cross_entropy_softcap",
    reference=_softcap_ce_ref,
    inputs=[
        opgate.TensorSpec("logits", ("B", "S", "V"), kind="logits", requires_grad=True),
        opgate.TensorSpec("labels", ("B", "S"), dtype="int64", kind="index", high="V"),
    ],
    dims={"B": [2, 1], "S": [4, 3], "V": [32000, 4099]},
    dtypes=DTYPES,
    perf_dims={"B": 4, "S": 2048, "V": 256000},
)


@unsloth_cross_entropy_softcap.implementation("unsloth_fast_cross_entropy_loss", backend="triton")
def _unsloth_ce_softcap(logits, labels):
    return fast_cross_entropy_loss(logits, every_third_token_ignored(labels), logit_softcapping=SOFTCAP)
