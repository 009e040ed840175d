"""Library corpus: fla-core 0.6.0 fused losses, forward and gradients.

- fla_cross_entropy: fla.modules.fused_cross_entropy.cross_entropy_loss (FusedCrossEntropyLoss's functional form,
  reduction "none"): per-row cross-entropy with label_smoothing=0.1 and ignore_index=-100 (rows 1, 4, 7, ... are
  ignored: loss 0, no gradient); labels meet the argmax of their logits half the time (hits=). Gradient for the
  logits. The library returns an fp32 loss for every input dtype (its docstring).
- fla_cross_entropy_zloss_softcap: the same kernel with Gemma-2 style logit soft-capping (30 tanh(x/30)) and a
  PaLM-style z-loss (1e-4 logsumexp^2, included in the returned loss, per the docstring); gradient for the logits.
- fla_linear_cross_entropy: fla.modules.fused_linear_cross_entropy.fused_linear_cross_entropy_loss: mean
  cross-entropy of x W^T + b over the rows that are not ignored, without materialising the logits (8 chunks);
  gradients for x, W and b. Scalar fp32 loss.
- fla_kl_div: fla.modules.fused_kl_div.fused_kl_div_loss: KL(teacher || student) with both distributions
  softmax(x W^T) of a student (x, W) and a frozen teacher (target_x, target_W), reduction "batchmean" (the sum
  over rows and classes divided by the rows); gradients for x and W (the teacher must not require grad).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import opgate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _corpus_env import every_third_row_ignored  # noqa: E402


from fla.modules.fused_cross_entropy import cross_entropy_loss  # noqa: E402
from fla.modules.fused_kl_div import fused_kl_div_loss  # noqa: E402
from fla.modules.fused_linear_cross_entropy import fused_linear_cross_entropy_loss  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16"]


# ---------------------------------------------------------------- cross-entropy, label smoothing, ignore_index
def _ce_ref(logits, labels):
    target = every_third_row_ignored(labels)
    return F.cross_entropy(logits, target, reduction="none", ignore_index=-100, label_smoothing=0.1)


fla_cross_entropy = opgate.Operator(
    "fla_cross_entropy",
    reference=_ce_ref,
    inputs=[
        opgate.TensorSpec("logits", ("M", "V"), kind="logits", requires_grad=True),
        opgate.TensorSpec("labels", ("M",), dtype="int64", kind="index", high="V", hits="logits"),
    ],
    dims={"M": [8, 3], "V": [32000, 4099]},
    dtypes=DTYPES,
    perf_dims={"M": 8192, "V": 128256},
)


@fla_cross_entropy.implementation("fla_cross_entropy", backend="triton")
def _fla_cross_entropy(logits, labels):
    loss, _z_loss = cross_entropy_loss(logits, every_third_row_ignored(labels), label_smoothing=0.1,
                                       ignore_index=-100)
    return loss


# ---------------------------------------------------------------- soft-capping and z-loss
SOFTCAP = 30.0
Z_LOSS = 1e-4


def _ce_softcap_ref(logits, labels):
    z = SOFTCAP * torch.tanh(logits / SOFTCAP)
    return F.cross_entropy(z, labels, reduction="none") + Z_LOSS * torch.logsumexp(z, dim=-1) ** 2


fla_cross_entropy_zloss_softcap = opgate.Operator(
    "fla_cross_entropy_zloss_softcap",
    reference=_ce_softcap_ref,
    inputs=[
        opgate.TensorSpec("logits", ("M", "V"), kind="logits", requires_grad=True),
        opgate.TensorSpec("labels", ("M",), dtype="int64", kind="index", high="V"),
    ],
    dims={"M": [8, 3], "V": [32000, 4099]},
    dtypes=DTYPES,
    perf_dims={"M": 8192, "V": 256000},
)


@fla_cross_entropy_zloss_softcap.implementation("fla_cross_entropy", backend="triton")
def _fla_cross_entropy_softcap(logits, labels):
    loss, _z_loss = cross_entropy_loss(logits, labels, logit_softcapping=SOFTCAP, lse_square_scale=Z_LOSS)
    return loss


# ---------------------------------------------------------------- fused linear + cross-entropy
def _linear_ce_ref(x, labels, w, b):
    return F.cross_entropy(F.linear(x, w, b), every_third_row_ignored(labels), ignore_index=-100, reduction="mean")


fla_linear_cross_entropy = opgate.Operator(
    "fla_linear_cross_entropy",
    reference=_linear_ce_ref,
    inputs=[
        opgate.TensorSpec("x", ("M", "H"), requires_grad=True),
        opgate.TensorSpec("labels", ("M",), dtype="int64", kind="index", high="V"),
        opgate.TensorSpec("w", ("V", "H"), kind="uniform", low=-0.05, high=0.05, requires_grad=True),
        opgate.TensorSpec("b", ("V",), kind="uniform", low=-0.05, high=0.05, requires_grad=True),
    ],
    dims={"M": [16, 5], "H": [512, 128], "V": [8192, 1000]},
    dtypes=DTYPES,
    perf_dims={"M": 8192, "H": 4096, "V": 128256},
)


@fla_linear_cross_entropy.implementation("fla_linear_cross_entropy", backend="triton")
def _fla_linear_cross_entropy(x, labels, w, b):
    return fused_linear_cross_entropy_loss(x, every_third_row_ignored(labels), w, b, ignore_index=-100,
                                           reduction="mean")


# ---------------------------------------------------------------- fused linear + KL divergence (distillation)
def _kl_ref(x, target_x, w, target_w):
    student = F.log_softmax(F.linear(x, w), dim=-1)
    teacher = F.log_softmax(F.linear(target_x, target_w), dim=-1)
    return F.kl_div(student, teacher, reduction="batchmean", log_target=True)


fla_kl_div = opgate.Operator(
    "fla_kl_div",
    reference=_kl_ref,
    inputs=[
        opgate.TensorSpec("x", ("M", "H"), requires_grad=True),
        opgate.TensorSpec("target_x", ("M", "H")),
        opgate.TensorSpec("w", ("V", "H"), kind="uniform", low=-0.05, high=0.05, requires_grad=True),
        opgate.TensorSpec("target_w", ("V", "H"), kind="uniform", low=-0.05, high=0.05),
    ],
    dims={"M": [16, 5], "H": [512, 128], "V": [8192, 1000]},
    dtypes=DTYPES,
    perf_dims={"M": 8192, "H": 4096, "V": 128256},
)


@fla_kl_div.implementation("fla_kl_div", backend="triton")
def _fla_kl_div(x, target_x, w, target_w):
    return fused_kl_div_loss(x, target_x, w, target_w, reduction="batchmean")
