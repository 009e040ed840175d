"""Truth corpus: per-row cross-entropy loss (reduction="none") of logits (M, V) against labels (M,).

The labels hit the argmax of their row about half of the time (TensorSpec(hits="logits")): with confident
(peaked) logits those rows have softmax(x_label) -> 1 and a loss close to 0, where a low-precision intermediate
loses every digit.

Correct
- good_ce_triton: one program per row, online logsumexp over tiles in float32, loss = lse - x[label].
- good_ce_torch: log_softmax in float32, gather.

Buggy
- bad_ce_lowprec_lse_torch: keeps the logsumexp in the I/O dtype (as kernels that save lse for the backward in
  the activations' dtype do) and takes loss = lse - x[label]. When the label misses, the loss is large and the
  float16 rounding of lse (an ulp of |lse|) is as small as the output's own rounding; when the label meets a
  confident logit, the true loss is ~1e-4 and lse - x[label] is 0 or one float16 ulp of |x| (0.0156 at 20): every
  digit lost. Exact in float32 (lse stays float32 there).

Both good kernels read labels through their stride (a strided labels view is a legal input).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import opgate

cross_entropy = opgate.Operator(
    "cross_entropy",
    reference=lambda logits, labels: F.cross_entropy(logits, labels, reduction="none"),
    inputs=[
        opgate.TensorSpec("logits", ("M", "V"), kind="logits"),
        opgate.TensorSpec("labels", ("M",), dtype="int64", kind="index", high="V", hits="logits"),
    ],
    dims={"M": [8, 5], "V": [128, 1000]},
    dtypes=["float32", "float16"],
    flops=lambda M, V: 4 * M * V,
)

TILE = 512


@triton.jit
def _ce_fwd(x_ptr, lab_ptr, loss_ptr, V, sxm, sxv, slab, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, TILE)
    x_row = x_ptr + row * sxm
    m = float("-inf")
    s = 0.0
    for start in range(0, V, TILE):
        cols = start + offs
        x = tl.load(x_row + cols * sxv, mask=cols < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, 0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe), 0)
        m = m_new
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    lse = m_safe + tl.log(s)
    label = tl.load(lab_ptr + row * slab)
    x_label = tl.load(x_row + label * sxv).to(tl.float32)
    tl.store(loss_ptr + row, (lse - x_label).to(loss_ptr.dtype.element_ty))


@cross_entropy.implementation("good_ce_triton", backend="triton")
def good_ce_triton(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    M, V = logits.shape
    loss = torch.empty((M,), dtype=logits.dtype, device=logits.device)
    if M == 0:
        return loss
    _ce_fwd[(M,)](logits, labels, loss, V, logits.stride(0), logits.stride(1), labels.stride(0),
                  TILE=min(triton.next_power_of_2(V), TILE))
    return loss


@cross_entropy.implementation("good_ce_torch", backend="torch")
def good_ce_torch(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits.float(), dim=-1)
    return (-logp.gather(-1, labels[:, None])[:, 0]).to(logits.dtype)


@cross_entropy.implementation("bad_ce_lowprec_lse_torch", backend="torch")
def bad_ce_lowprec_lse_torch(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    lse = torch.logsumexp(logits.float(), dim=-1).to(logits.dtype)  # saved in the I/O dtype for the backward
    x_label = logits.gather(-1, labels[:, None])[:, 0]
    return (lse.float() - x_label.float()).to(logits.dtype)
