"""Truth corpus: a training kernel, cross-entropy with a backward (reduction="none", gradient w.r.t. logits).

Correct
- good_ce_fused_triton: torch.autograd.Function; a Triton forward (online logsumexp, saves lse) and a Triton
  backward kernel computing grad_out[m] * (softmax(x)[m] - onehot(label)[m]).
- good_ce_grad_in_forward_triton: Liger-style: the forward kernel already writes the gradient
  softmax - onehot into a buffer (saving the second pass over the logits); backward scales it by grad_out.

Buggy
- bad_ce_grad_in_forward_unchanged_triton: the same design, but the buffer the backward reads is the logits tensor
  itself (the kernel wrote its gradient into a temporary that was dropped): the loss is right, the gradient is
  grad_out * logits. Invisible to any check that runs under torch.no_grad().
- bad_ce_grad_ignores_upstream_triton: the backward returns softmax - onehot and never multiplies by grad_out (right
  only when the upstream gradient is all ones, as under loss.sum().backward(); TransformerEngine PR 2139's bug
  slipped through because its tests skipped the kernel when grad_out was 1).
- bad_ce_grad_scalar_upstream_triton: the backward loads grad_out as a scalar (grad_out[0]) for every row: right for
  reduction="mean"/"sum", wrong for reduction="none" with per-row upstream gradients (Liger-Kernel issues 678 and
  968: the gradient of reduction="none" used the first element of grad_output).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import opgate

ce_train = opgate.Operator(
    "cross_entropy_train",
    reference=lambda logits, labels: F.cross_entropy(logits, labels, reduction="none"),
    inputs=[
        opgate.TensorSpec("logits", ("M", "V"), kind="logits", requires_grad=True),
        opgate.TensorSpec("labels", ("M",), dtype="int64", kind="index", high="V"),
    ],
    dims={"M": [8, 3], "V": [256, 100]},
    dtypes=["float32"],
    flops=lambda M, V: 6 * M * V,
)

TILE = 256


@triton.jit
def _ce_fwd(x_ptr, lab_ptr, loss_ptr, lse_ptr, g_ptr, V, sxm, sxv, slab, sgm, TILE: tl.constexpr,
            WRITE_GRAD: tl.constexpr):
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
    tl.store(lse_ptr + row, lse)
    if WRITE_GRAD:
        for start in range(0, V, TILE):
            cols = start + offs
            mask = cols < V
            x = tl.load(x_row + cols * sxv, mask=mask, other=0.0).to(tl.float32)
            g = tl.exp(x - lse) - tl.where(cols == label, 1.0, 0.0)
            tl.store(g_ptr + row * sgm + cols, g.to(g_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _ce_bwd(x_ptr, lab_ptr, lse_ptr, go_ptr, gx_ptr, V, sxm, sxv, slab, sgm, TILE: tl.constexpr,
            SCALE: tl.constexpr):
    # SCALE: 1 multiplies row m by grad_out[m]; 0 never multiplies; 2 multiplies every row by grad_out[0].
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, TILE)
    lse = tl.load(lse_ptr + row)
    label = tl.load(lab_ptr + row * slab)
    if SCALE == 1:
        go = tl.load(go_ptr + row).to(tl.float32)
    elif SCALE == 2:
        go = tl.load(go_ptr).to(tl.float32)
    else:
        go = 1.0
    for start in range(0, V, TILE):
        cols = start + offs
        mask = cols < V
        x = tl.load(x_ptr + row * sxm + cols * sxv, mask=mask, other=0.0).to(tl.float32)
        g = (tl.exp(x - lse) - tl.where(cols == label, 1.0, 0.0)) * go
        tl.store(gx_ptr + row * sgm + cols, g.to(gx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _scale_rows(g_ptr, go_ptr, out_ptr, V, sgm, sgv, som, TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, TILE)
    go = tl.load(go_ptr + row).to(tl.float32)
    for start in range(0, V, TILE):
        cols = start + offs
        mask = cols < V
        g = tl.load(g_ptr + row * sgm + cols * sgv, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * som + cols, (g * go).to(out_ptr.dtype.element_ty), mask=mask)


def _forward(logits: torch.Tensor, labels: torch.Tensor, write_grad: bool):
    M, V = logits.shape
    loss = torch.empty((M,), dtype=logits.dtype, device=logits.device)
    lse = torch.empty((M,), dtype=torch.float32, device=logits.device)
    grad = torch.empty((M, V), dtype=logits.dtype, device=logits.device) if write_grad else lse
    if M:
        _ce_fwd[(M,)](logits, labels, loss, lse, grad, V, logits.stride(0), logits.stride(1), labels.stride(0),
                      grad.stride(0) if write_grad else 0, TILE=min(triton.next_power_of_2(V), TILE),
                      WRITE_GRAD=write_grad)
    return loss, lse, grad


class _FusedCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels, scale_upstream: int):
        loss, lse, _ = _forward(logits, labels, write_grad=False)
        ctx.save_for_backward(logits, labels, lse)
        ctx.scale_upstream = scale_upstream
        return loss

    @staticmethod
    def backward(ctx, grad_out):
        logits, labels, lse = ctx.saved_tensors
        M, V = logits.shape
        gx = torch.empty((M, V), dtype=logits.dtype, device=logits.device)
        if M:
            _ce_bwd[(M,)](logits, labels, lse, grad_out.contiguous(), gx, V, logits.stride(0), logits.stride(1),
                          labels.stride(0), gx.stride(0), TILE=min(triton.next_power_of_2(V), TILE),
                          SCALE=ctx.scale_upstream)
        return gx, None, None


class _GradInForwardCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels, keep_buffer: bool):
        loss, _, grad = _forward(logits, labels, write_grad=True)
        ctx.save_for_backward(grad if keep_buffer else logits)
        return loss

    @staticmethod
    def backward(ctx, grad_out):
        (grad,) = ctx.saved_tensors
        M, V = grad.shape
        gx = torch.empty((M, V), dtype=grad.dtype, device=grad.device)
        if M:
            _scale_rows[(M,)](grad, grad_out.contiguous(), gx, V, grad.stride(0), grad.stride(1), gx.stride(0),
                              TILE=min(triton.next_power_of_2(V), TILE))
        return gx, None, None


@ce_train.implementation("good_ce_fused_triton", backend="triton")
def good_ce_fused_triton(logits, labels):
    return _FusedCE.apply(logits, labels, 1)


@ce_train.implementation("good_ce_grad_in_forward_triton", backend="triton")
def good_ce_grad_in_forward_triton(logits, labels):
    return _GradInForwardCE.apply(logits, labels, True)


@ce_train.implementation("bad_ce_grad_in_forward_unchanged_triton", backend="triton")
def bad_ce_grad_in_forward_unchanged_triton(logits, labels):
    return _GradInForwardCE.apply(logits, labels, False)


@ce_train.implementation("bad_ce_grad_ignores_upstream_triton", backend="triton")
def bad_ce_grad_ignores_upstream_triton(logits, labels):
    return _FusedCE.apply(logits, labels, 0)


@ce_train.implementation("bad_ce_grad_scalar_upstream_triton", backend="triton")
def bad_ce_grad_scalar_upstream_triton(logits, labels):
    return _FusedCE.apply(logits, labels, 2)
