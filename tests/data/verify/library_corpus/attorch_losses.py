"""Library corpus: attorch (67c2772) loss layers, forward and gradients (on a GPU, and on the CPU through Triton's
interpreter: see _attorch_env.py). Half precision: half inputs, no autocast (the loss comes back in the input dtype, as
PyTorch's does).

- attorch_cross_entropy: attorch.CrossEntropyLoss(weight=w): "the mean cross entropy loss between the input and
  target, with optional reweighing of each class" = F.cross_entropy(logits, labels, weight=w) (the weighted mean:
  divided by the summed weights of the labels). Its docstring: only reduction "mean", no label smoothing, no
  ignore_index, 2D input; the spec uses none of those. Labels meet the argmax of their logits half the time
  (hits=). Gradient for the logits (class weights are constants, as in PyTorch).
- attorch_nll_loss: attorch.NLLLoss(weight=w) on a segmentation-like (batch, classes, pixels) input of
  log-probabilities with (batch, pixels) targets ("an arbitrary number of spatial dimensions") = F.nll_loss
  (weighted mean); gradient for the input. ignore_index is documented as unsupported and not used.
- attorch_mse_loss: attorch.MSELoss() = F.mse_loss (mean); gradients for input and target.
- attorch_huber_loss: attorch.HuberLoss(reduction="none", delta=0.5) = F.huber_loss elementwise. Its docstring lists
  "beta: Beta value for the softening threshold", but the constructor is nn.HuberLoss's (reduction, delta) and
  HuberLoss(beta=...) is a TypeError, so the spec passes delta. Gradients for input and target.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch.nn.functional as F

import opgate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _attorch_env import attorch, implementation  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16"]


# ---------------------------------------------------------------- cross-entropy with class weights
attorch_cross_entropy = opgate.Operator(
    "attorch_cross_entropy",
    reference=lambda logits, labels, w: F.cross_entropy(logits, labels, weight=w),
    inputs=[
        opgate.TensorSpec("logits", ("M", "V"), kind="logits", requires_grad=True),
        opgate.TensorSpec("labels", ("M",), dtype="int64", kind="index", high="V", hits="logits"),
        opgate.TensorSpec("w", ("V",), kind="uniform", low=0.5, high=2.0),
    ],
    dims={"M": [64, 7], "V": [1000, 32000]},
    dtypes=DTYPES,
    perf_dims={"M": 8192, "V": 32000},
)


@implementation(attorch_cross_entropy, "attorch_cross_entropy")
def _attorch_cross_entropy(logits, labels, w):
    return attorch.CrossEntropyLoss(weight=w)(logits, labels)


# ---------------------------------------------------------------- NLL over pixels, class weights
attorch_nll_loss = opgate.Operator(
    "attorch_nll_loss",
    reference=lambda x, labels, w: F.nll_loss(x, labels, weight=w),
    inputs=[
        opgate.TensorSpec("x", ("B", "C", "S"), kind="uniform", low=-12.0, high=0.0, requires_grad=True),  # log p
        opgate.TensorSpec("labels", ("B", "S"), dtype="int64", kind="index", high="C"),
        opgate.TensorSpec("w", ("C",), kind="uniform", low=0.5, high=2.0),
    ],
    dims={"B": [8, 3], "C": [21, 10], "S": [4096, 961]},  # 21 classes of VOC, 64 x 64 and 31 x 31 pixel maps
    dtypes=DTYPES,
    perf_dims={"B": 32, "C": 21, "S": 65536},
)


@implementation(attorch_nll_loss, "attorch_nll_loss")
def _attorch_nll_loss(x, labels, w):
    return attorch.NLLLoss(weight=w)(x, labels)


# ---------------------------------------------------------------- regression losses
attorch_mse_loss = opgate.Operator(
    "attorch_mse_loss",
    reference=lambda x, y: F.mse_loss(x, y),
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("y", ("M", "N"), requires_grad=True),
    ],
    dims={"M": [64, 7], "N": [1024, 1000]},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "N": 4096},
)


@implementation(attorch_mse_loss, "attorch_mse_loss")
def _attorch_mse_loss(x, y):
    return attorch.MSELoss()(x, y)


DELTA = 0.5

attorch_huber_loss = opgate.Operator(
    "attorch_huber_loss",
    reference=lambda x, y: F.huber_loss(x, y, reduction="none", delta=DELTA),
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("y", ("M", "N"), requires_grad=True),
    ],
    dims={"M": [64, 7], "N": [1024, 1000]},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "N": 4096},
)


@implementation(attorch_huber_loss, "attorch_huber_loss")
def _attorch_huber_loss(x, y):
    return attorch.HuberLoss(reduction="none", delta=DELTA)(x, y)
