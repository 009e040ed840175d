"""Truth corpus: causal attention softmax(q k^T / sqrt(D) + causal mask) v over (B, S, D), FlashAttention-style.

propagates_nonfinite=False: P @ V multiplies masked zero probabilities by V, so a NaN in a future V row reaches rows
that cannot see it in SDPA and in blocked kernels alike, at places set by the blocking.

- good_attn_triton: one program per (batch, 16-query block), online softmax over 16-key blocks with exp2 and the
  1/sqrt(D) * log2(e) scale folded into q, stops at the diagonal block, float32 accumulators.
- bad_attn_causal_offbyone_triton: the mask keeps key n when n <= m + 1, so every query also sees the next one.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import opgate

causal_attention = opgate.Operator(
    "causal_attention",
    reference=lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    inputs=[opgate.TensorSpec("q", ("B", "S", "D")), opgate.TensorSpec("k", ("B", "S", "D")),
            opgate.TensorSpec("v", ("B", "S", "D"))],
    dims={"B": [2, 1], "S": [64, 37], "D": [16]},
    exact_dims=["D"],
    dtypes=["float32"],
    propagates_nonfinite=False,
)

BLOCK_M = 16
BLOCK_N = 16


@triton.jit
def _attn(q_ptr, k_ptr, v_ptr, o_ptr, S, qk_scale,
          sqb, sqs, sqd, skb, sks, skd, svb, svs, svd, sob, sos, sod,
          D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LOOKAHEAD: tl.constexpr):
    bid = tl.program_id(0).to(tl.int64)
    mid = tl.program_id(1)
    rm = mid * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + bid * sqb + rm[:, None] * sqs + rd[None, :] * sqd, mask=rm[:, None] < S, other=0.0)
    q = (q.to(tl.float32) * qk_scale)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    hi = tl.minimum((mid + 1) * BLOCK_M + LOOKAHEAD, S)
    for start in range(0, hi, BLOCK_N):
        rn = start + tl.arange(0, BLOCK_N)
        kv_mask = rn[:, None] < S
        k = tl.load(k_ptr + bid * skb + rn[:, None] * sks + rd[None, :] * skd, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + bid * svb + rn[:, None] * svs + rd[None, :] * svd, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k.to(tl.float32)), input_precision="ieee")
        keep = (rn[None, :] <= rm[:, None] + LOOKAHEAD) & (rn[None, :] < S)
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision="ieee")
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + bid * sob + rm[:, None] * sos + rd[None, :] * sod, out.to(o_ptr.dtype.element_ty),
             mask=rm[:, None] < S)


def _launch(q, k, v, lookahead: int):
    B, S, D = q.shape
    o = torch.empty((B, S, D), dtype=q.dtype, device=q.device)
    if B * S == 0:
        return o
    scale = 1.0 / math.sqrt(D) * 1.4426950408889634
    _attn[(B, triton.cdiv(S, BLOCK_M))](q, k, v, o, S, scale, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
                                        D=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, LOOKAHEAD=lookahead)
    return o


@causal_attention.implementation("good_attn_triton", backend="triton")
def good_attn_triton(q, k, v):
    return _launch(q, k, v, lookahead=0)


@causal_attention.implementation("bad_attn_causal_offbyone_triton", backend="triton")
def bad_attn_causal_offbyone_triton(q, k, v):
    return _launch(q, k, v, lookahead=1)
