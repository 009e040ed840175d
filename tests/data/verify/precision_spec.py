"""Precision deficits against eager, and wrong formulas beside them (tests/verify/test_verify_precision_class.py).

softmax (bfloat16, gradient w.r.t. x):
  torch                          correct
  bf16_backward_sum              backward sums dy * y in bfloat16 (a pairwise tree rounding every partial sum, as
                                 compiled Triton's tl.sum combines bfloat16 without dtype=tl.float32); eager sums
                                 in float32. The formula is right: [precision] on the `.grad` twin
  backward_without_the_sum       dx = y * dy: the - sum(dy * y) term forgotten. [gradient]
  backward_ignores_upstream      dx = y * (1 - sum(y)): the upstream gradient never read. [gradient]
kl_div (bfloat16 inputs, a float32 per-row divergence computed in float32, as eager does it):
  torch                          correct
  bf16_sum                       sums the float32 terms in the inputs' dtype, bfloat16, and returns the sum as
                                 float32: hundreds of times eager's error, yet the formula is right. [precision]
  wrong_sign                     sum p (log q - log p): the divergence negated. [typical]
target_loss (bfloat16, a float32 cross-entropy of target 0: logsumexp of e @ c.T minus the first logit):
  torch                          correct
  rounded_target                 the log-sum-exp from a float32 matmul, the target logit from products rounded to
                                 bfloat16 (cut-cross-entropy 25.1.1's indexed dot): the two do not cancel at V = 1,
                                 where eager's loss is exactly 0, an edge size opgate adds. A rounding, not a tail
                                 mask: its error falls thousands of times in float32. [precision]
"""

from __future__ import annotations

import torch

import opgate


def sum_in_dtype(t: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim with every partial sum rounded to t's dtype (a pairwise tree), keepdim."""
    n = t.shape[-1]
    width = 1 << max(n - 1, 0).bit_length()
    t = torch.nn.functional.pad(t, (0, width - n))
    while t.shape[-1] > 1:
        half = t.shape[-1] // 2
        t = t[..., :half] + t[..., half:]
    return t


# -- softmax and its backward ---------------------------------------------------------------------------------------

softmax = opgate.Operator(
    "softmax",
    reference=lambda x: torch.softmax(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits", requires_grad=True)],
    dims={"M": [4], "N": [64, 200]},
    dtypes=["bfloat16"],
)


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, backward):
        y = torch.softmax(x, dim=-1)
        ctx.save_for_backward(y)
        ctx.backward = backward
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        if ctx.backward == "bf16_sum":
            return y * (dy - sum_in_dtype(dy * y)), None
        if ctx.backward == "without_the_sum":
            return y * dy, None
        if ctx.backward == "ignores_upstream":
            return y * (1 - y.float().sum(-1, keepdim=True)).to(y.dtype), None
        raise ValueError(ctx.backward)


@softmax.implementation("torch")
def softmax_torch(x):
    return torch.softmax(x, dim=-1)


@softmax.implementation("bf16_backward_sum", backend="torch")
def softmax_bf16_backward_sum(x):
    return _Softmax.apply(x, "bf16_sum")


@softmax.implementation("backward_without_the_sum", backend="torch")
def softmax_backward_without_the_sum(x):
    return _Softmax.apply(x, "without_the_sum")


@softmax.implementation("backward_ignores_upstream", backend="torch")
def softmax_backward_ignores_upstream(x):
    return _Softmax.apply(x, "ignores_upstream")


# -- a divergence that returns float32 ------------------------------------------------------------------------------

def _terms(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """p (log p - log q) per element, in float32 at least (float64 for the truth)."""
    wide = torch.promote_types(logp.dtype, torch.float32)
    logp, logq = logp.to(wide), logq.to(wide)
    return torch.softmax(logp, dim=-1) * (torch.log_softmax(logp, dim=-1) - torch.log_softmax(logq, dim=-1))


kl_div = opgate.Operator(
    "kl_div",
    reference=lambda logp, logq: _terms(logp, logq).sum(-1),
    inputs=[opgate.TensorSpec("logp", ("M", "N"), kind="logits"), opgate.TensorSpec("logq", ("M", "N"), kind="logits")],
    dims={"M": [4], "N": [64, 200]},
    dtypes=["bfloat16"],
)


@kl_div.implementation("torch")
def kl_div_torch(logp, logq):
    return _terms(logp, logq).sum(-1)


@kl_div.implementation("bf16_sum", backend="torch")
def kl_div_bf16_sum(logp, logq):
    # the terms in float32, their sum in the inputs' dtype (a kernel that accumulates in what it loaded)
    return sum_in_dtype(_terms(logp, logq).to(logp.dtype))[..., 0].to(torch.promote_types(logp.dtype, torch.float32))


@kl_div.implementation("wrong_sign", backend="torch")
def kl_div_wrong_sign(logp, logq):
    return -_terms(logp, logq).sum(-1)


# -- a loss whose two terms are rounded differently -----------------------------------------------------------------

def _target_loss(e: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    logits = (e @ c.T).to(torch.promote_types(e.dtype, torch.float32))
    return torch.logsumexp(logits, dim=-1) - logits[:, 0]


target_loss = opgate.Operator(
    "target_loss",
    reference=_target_loss,
    inputs=[opgate.TensorSpec("e", ("M", "D")), opgate.TensorSpec("c", ("V", "D"))],
    dims={"M": [4], "V": [5, 37], "D": [256]},
    dtypes=["bfloat16"],
)


@target_loss.implementation("torch")
def target_loss_torch(e, c):
    return _target_loss(e, c)


@target_loss.implementation("rounded_target", backend="torch")
def target_loss_rounded_target(e, c):
    lse = torch.logsumexp(e.float() @ c.float().T, dim=-1)
    return lse - (e * c[0]).float().sum(-1)  # each product rounded to bfloat16 before the float32 sum
