"""Training kernels with a backward: a fused cross-entropy and a layer norm, as torch.autograd.Functions whose
forward and backward are Triton kernels (the interpreter runs them on CPU), with buggy twins.

cross_entropy (per-row loss, labels that hit the argmax of the logits half of the time):
  torch, torch_composed, triton        correct
  triton_grad_no_onehot                backward forgets the -1 at the label (softmax instead of softmax - onehot)
  triton_grad_scaled                   backward divides by M (a mean-reduction gradient for a per-row loss)
  triton_no_backward                   a bare Triton launch: the forward is right, there is no backward
layer_norm (gradients w.r.t. x and w):
  torch, torch_composed, triton        correct
  triton_dw_bug                        dx right, dw sums dy * (x - mean) without the 1/std
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import opgate

# -- cross-entropy ----------------------------------------------------------------------------------------------

cross_entropy = opgate.Operator(
    "cross_entropy",
    reference=lambda logits, labels: torch.nn.functional.cross_entropy(logits, labels, reduction="none"),
    inputs=[
        opgate.TensorSpec("logits", ("M", "V"), kind="logits", requires_grad=True),
        opgate.TensorSpec("labels", ("M",), dtype="int64", kind="index", high="V", hits="logits"),
    ],
    dims={"M": [4, 9], "V": [32, 100]},
    dtypes=["float32"],
    exact_dims=["M"],  # one interpreted program per row: tens of thousands of rows take minutes on a CPU
)


@triton.jit
def _ce_forward(logits_ptr, labels_ptr, loss_ptr, lse_ptr, stride_m, stride_v, stride_l, V, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < V
    x = tl.load(logits_ptr + row * stride_m + cols * stride_v, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, 0)
    lse = m + tl.log(tl.sum(tl.exp(x - m), 0))
    label = tl.load(labels_ptr + row * stride_l)
    x_label = tl.load(logits_ptr + row * stride_m + label * stride_v).to(tl.float32)
    tl.store(loss_ptr + row, lse - x_label)
    tl.store(lse_ptr + row, lse)


@triton.jit
def _ce_backward(logits_ptr, labels_ptr, dloss_ptr, dlogits_ptr, stride_m, stride_v, stride_l, V, scale,
                 BLOCK: tl.constexpr, ONEHOT: tl.constexpr):
    # softmax - onehot, with the label's entry as -(sum of the other exps) / sum: no 1 - p cancellation when the
    # label's probability is close to 1
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < V
    x = tl.load(logits_ptr + row * stride_m + cols * stride_v, mask=mask, other=-float("inf")).to(tl.float32)
    label = tl.load(labels_ptr + row * stride_l)
    e = tl.exp(x - tl.max(x, 0))
    total = tl.sum(e, 0)
    if ONEHOT:
        rest = tl.sum(tl.where(cols == label, 0.0, e), 0)
        grad = tl.where(cols == label, -rest, e) / total
    else:
        grad = e / total
    dloss = tl.load(dloss_ptr + row).to(tl.float32)
    tl.store(dlogits_ptr + row * V + cols, grad * dloss * scale, mask=mask)


def _ce_launch(logits, labels):
    M, V = logits.shape
    loss = torch.empty(M, dtype=logits.dtype, device=logits.device)
    lse = torch.empty(M, dtype=torch.float32, device=logits.device)
    if M:
        _ce_forward[(M,)](logits, labels, loss, lse, logits.stride(0), logits.stride(1), labels.stride(0), V,
                          BLOCK=triton.next_power_of_2(V))
    return loss, lse


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels, onehot, scale_by_rows):
        loss, lse = _ce_launch(logits, labels)
        ctx.save_for_backward(logits, labels)
        ctx.onehot, ctx.scale_by_rows = onehot, scale_by_rows
        return loss

    @staticmethod
    def backward(ctx, dloss):
        logits, labels = ctx.saved_tensors
        M, V = logits.shape
        dlogits = torch.empty((M, V), dtype=logits.dtype, device=logits.device)
        scale = 1.0 / M if ctx.scale_by_rows else 1.0
        if M:
            _ce_backward[(M,)](logits, labels, dloss.contiguous(), dlogits, logits.stride(0), logits.stride(1),
                               labels.stride(0), V, scale, BLOCK=triton.next_power_of_2(V), ONEHOT=ctx.onehot)
        return dlogits, None, None, None


@cross_entropy.implementation("torch")
def cross_entropy_torch(logits, labels):
    return torch.nn.functional.cross_entropy(logits, labels, reduction="none")


@cross_entropy.implementation("torch_composed", backend="torch")
def cross_entropy_composed(logits, labels):
    return -torch.log_softmax(logits, dim=-1).gather(-1, labels[:, None])[:, 0]


@cross_entropy.implementation("triton")
def cross_entropy_triton(logits, labels):
    return _CrossEntropy.apply(logits, labels, True, False)


@cross_entropy.implementation("triton_grad_no_onehot", backend="triton")
def cross_entropy_no_onehot(logits, labels):
    return _CrossEntropy.apply(logits, labels, False, False)


@cross_entropy.implementation("triton_grad_scaled", backend="triton")
def cross_entropy_scaled(logits, labels):
    return _CrossEntropy.apply(logits, labels, True, True)


@cross_entropy.implementation("triton_no_backward", backend="triton")
def cross_entropy_no_backward(logits, labels):
    return _ce_launch(logits, labels)[0]


# -- layer norm -------------------------------------------------------------------------------------------------

layer_norm = opgate.Operator(
    "layer_norm",
    reference=lambda x, w, b, eps: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps),
    inputs=[
        # bounded kinds: a float32 layer norm's range limit (variance overflow near 1e19) is not this spec's subject
        opgate.TensorSpec("x", ("M", "N"), kind="uniform", low=-3.0, high=3.0, requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.TensorSpec("b", ("N",), kind="uniform"),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"M": [4, 7], "N": [32, 48]},
    dtypes=["float32"],
    exact_dims=["M"],  # one interpreted program per row: tens of thousands of rows take minutes on a CPU
)


@triton.jit
def _ln_forward(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, stride_m, stride_n, stride_w, stride_b, N, eps,
                BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_m + cols * stride_n, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, 0) / N
    diff = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(diff * diff, 0) / N + eps)
    w = tl.load(w_ptr + cols * stride_w, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols * stride_b, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * N + cols, diff * rstd * w + b, mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def _ln_backward(x_ptr, w_ptr, dy_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_part_ptr, stride_m, stride_n, stride_w, N,
                 BLOCK: tl.constexpr, DW_BUG: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_m + cols * stride_n, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols * stride_w, mask=mask, other=0.0).to(tl.float32)
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    wdy = w * dy
    c1 = tl.sum(xhat * wdy, 0) / N
    c2 = tl.sum(wdy, 0) / N
    tl.store(dx_ptr + row * N + cols, (wdy - (xhat * c1 + c2)) * rstd, mask=mask)
    if DW_BUG:
        tl.store(dw_part_ptr + row * N + cols, dy * (x - mean), mask=mask)
    else:
        tl.store(dw_part_ptr + row * N + cols, dy * xhat, mask=mask)


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, eps, dw_bug):
        M, N = x.shape
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
        mean = torch.empty(M, dtype=torch.float32, device=x.device)
        rstd = torch.empty(M, dtype=torch.float32, device=x.device)
        if M:
            _ln_forward[(M,)](x, w, b, y, mean, rstd, x.stride(0), x.stride(1), w.stride(0), b.stride(0), N, eps,
                              BLOCK=triton.next_power_of_2(N))
        ctx.save_for_backward(x, w, mean, rstd)
        ctx.dw_bug = dw_bug
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, mean, rstd = ctx.saved_tensors
        M, N = x.shape
        dx = torch.empty((M, N), dtype=x.dtype, device=x.device)
        dw_part = torch.empty((M, N), dtype=torch.float32, device=x.device)
        if M:
            _ln_backward[(M,)](x, w, dy.contiguous(), mean, rstd, dx, dw_part, x.stride(0), x.stride(1),
                               w.stride(0), N, BLOCK=triton.next_power_of_2(N), DW_BUG=ctx.dw_bug)
        return dx, dw_part.sum(0).to(w.dtype), None, None, None


@layer_norm.implementation("torch")
def layer_norm_torch(x, w, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


@layer_norm.implementation("torch_composed", backend="torch")
def layer_norm_composed(x, w, b, eps):
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + eps) * w + b


@layer_norm.implementation("triton")
def layer_norm_triton(x, w, b, eps):
    return _LayerNorm.apply(x, w, b, eps, False)


@layer_norm.implementation("triton_dw_bug", backend="triton")
def layer_norm_dw_bug(x, w, b, eps):
    return _LayerNorm.apply(x, w, b, eps, True)
