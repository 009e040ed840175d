"""A soft-capped cross-entropy (Gemma 2's final logit soft-capping, softcap x tanh(logits / softcap), then a per-row
loss) as Triton kernels that use a construct Triton's CPU interpreter cannot run, though it is valid Triton:
`(1.0 / softcap).to(tl.float32)` on a float kernel argument (compiled, the argument is a float32 scalar tensor; the
interpreter keeps it a Python float: AttributeError: 'float' object has no attribute 'to').

  torch                   correct, no Triton
  triton                  rows up to 1024 columns in one tile; longer rows in a looped kernel with the construct:
                          only the long-row cases stop in the interpreter, the others pass
  triton_gap_everywhere   the looped kernel for every row: every case stops in the interpreter (none is judged)
  triton_gap_and_bug      as `triton`, but the one-tile kernel reads the label of row 0 for every row: wrong where
                          the interpreter runs it, and the failure stands
  wrapper_error           the Python wrapper itself calls .to on the float: the implementation's own crash
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

SOFTCAP = 30.0
LOOP_BLOCK = 1024  # rows longer than one tile of this many columns take the looped kernel


def softcapped_cross_entropy(logits, labels, softcap):
    capped = softcap * torch.tanh(logits / softcap)
    return torch.nn.functional.cross_entropy(capped, labels, reduction="none")


softcap_ce = opgate.Operator(
    "softcap_ce",
    reference=softcapped_cross_entropy,
    inputs=[
        opgate.TensorSpec("logits", ("M", "V"), kind="logits"),
        opgate.TensorSpec("labels", ("M",), dtype="int64", kind="index", high="V", hits="logits"),
        opgate.Scalar("softcap", SOFTCAP),
    ],
    dims={"M": [4], "V": [32, 100]},
    dtypes=["float16"],
    exact_dims=["M"],  # no empty batch: with the looped kernel everywhere, every case meets the construct
)


@triton.jit
def _tanh(y):
    e = tl.exp(-2.0 * tl.abs(y))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(y < 0, -t, t)


@triton.jit
def _ce_one_tile(logits_ptr, labels_ptr, loss_ptr, stride_m, stride_v, stride_l, V, softcap, BLOCK: tl.constexpr,
                 LABEL_OF_ROW0: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < V
    x = tl.load(logits_ptr + row * stride_m + cols * stride_v, mask=mask, other=0.0).to(tl.float32)
    z = tl.where(mask, softcap * _tanh(x / softcap), -float("inf"))
    m = tl.max(z, 0)
    lse = m + tl.log(tl.sum(tl.exp(z - m), 0))
    if LABEL_OF_ROW0:
        label = tl.load(labels_ptr)  # the bug: every row reads row 0's label
    else:
        label = tl.load(labels_ptr + row * stride_l)
    x_label = tl.load(logits_ptr + row * stride_m + label * stride_v).to(tl.float32)
    tl.store(loss_ptr + row, lse - softcap * _tanh(x_label / softcap))


@triton.jit
def _ce_looped(logits_ptr, labels_ptr, loss_ptr, stride_m, stride_v, stride_l, V, softcap, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    inv_cap = (1.0 / softcap).to(tl.float32)  # valid Triton; the interpreter keeps softcap a Python float
    m = float("-inf")
    s = 0.0
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < V
        x = tl.load(logits_ptr + row * stride_m + cols * stride_v, mask=mask, other=0.0).to(tl.float32)
        z = tl.where(mask, softcap * _tanh(x * inv_cap), -float("inf"))
        m_new = tl.maximum(m, tl.max(z, 0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(z - m_new), 0)
        m = m_new
    label = tl.load(labels_ptr + row * stride_l)
    x_label = tl.load(logits_ptr + row * stride_m + label * stride_v).to(tl.float32)
    tl.store(loss_ptr + row, m + tl.log(s) - softcap * _tanh(x_label * inv_cap))


def _launch(logits, labels, softcap, looped_from, label_of_row0=False):
    M, V = logits.shape
    loss = torch.empty(M, dtype=logits.dtype, device=logits.device)
    args = (logits, labels, loss, logits.stride(0), logits.stride(1), labels.stride(0), V, softcap)
    if V > looped_from:
        _ce_looped[(M,)](*args, BLOCK=LOOP_BLOCK)
    else:
        _ce_one_tile[(M,)](*args, BLOCK=triton.next_power_of_2(V), LABEL_OF_ROW0=label_of_row0)
    return loss


@softcap_ce.implementation("torch")
def softcap_ce_torch(logits, labels, softcap):
    return softcapped_cross_entropy(logits, labels, softcap)


@softcap_ce.implementation("triton")
def softcap_ce_triton(logits, labels, softcap):
    return _launch(logits, labels, softcap, looped_from=LOOP_BLOCK)


@softcap_ce.implementation("triton_gap_everywhere", backend="triton")
def softcap_ce_gap_everywhere(logits, labels, softcap):
    return _launch(logits, labels, softcap, looped_from=0)


@softcap_ce.implementation("triton_gap_and_bug", backend="triton")
def softcap_ce_gap_and_bug(logits, labels, softcap):
    return _launch(logits, labels, softcap, looped_from=LOOP_BLOCK, label_of_row0=True)


@softcap_ce.implementation("wrapper_error", backend="triton")
def softcap_ce_wrapper_error(logits, labels, softcap):
    inv_cap = (1.0 / softcap).to(torch.float32)  # the wrapper's own bug: a Python float has no .to
    return _launch(logits, labels, 1.0 / inv_cap, looped_from=LOOP_BLOCK)
