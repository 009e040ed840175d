"""Causal scaled-dot-product attention: softmax(Q K^T / sqrt(D) + causal mask) V, Q/K/V of shape (B, H, S, D).

Causal means query i attends keys j <= i (torch's is_causal=True, top-left aligned; with one S for queries and
keys this is the usual lower triangle).

Implementations
- triton: a FlashAttention-style forward: one program per (query block, batch x head); it walks key blocks only up
  to the diagonal, keeps a running row max and sum in float32 and rescales the output accumulator whenever the max
  grows (online softmax). P is rounded to the input dtype before P @ V, as FlashAttention does. D need not be a
  power of two (the head dim is padded to one and masked).
- torch: the math written out (scores, -inf above the diagonal, softmax, @ V), in float32 for half types.
- onnxruntime: attention.onnx (Attention-23 with is_causal=1, float32 only), written by make_onnx_models.py.

Non-finite inputs: propagates_nonfinite=False. A NaN in q or k lands where the meaning says (that query's row; the
rows that see that key), but P @ V multiplies masked, zero probabilities by V, so a NaN in a *future* value row
reaches rows that cannot see it: every row in torch's SDPA (the reference), the rows of the same key block in a
blocked kernel. Where it lands is an artefact of blocking, not of the operator, so NaN/Inf injection is off here.

Triton interpreter note: as in matmul.py, bfloat16 tiles are widened to float32 before tl.dot when the kernel is
interpreted (the interpreter's bfloat16 tl.dot multiplies raw bit patterns, triton-lang/triton#11584). P is still
rounded to bfloat16 first, so the result is what the GPU computes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import opgate

attention = opgate.Operator(
    "causal_attention",
    reference=lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    inputs=[
        opgate.TensorSpec("q", ("B", "H", "S", "D")),
        opgate.TensorSpec("k", ("B", "H", "S", "D")),
        opgate.TensorSpec("v", ("B", "H", "S", "D")),
    ],
    dims={"B": [2, 1], "H": [4, 3], "S": [128, 64, 100, 1], "D": [64, 32, 80]},
    perf_dims={"B": 4, "H": 16, "S": 2048, "D": 64},  # the size the GPU runtime stage times and profiles
    dtypes=["float32", "float16", "bfloat16"],
    propagates_nonfinite=False,  # see the module docstring: NaN in a future V row leaks through 0 * NaN
    # QK^T and PV over the lower triangle only.
    flops=lambda B, H, S, D: 2 * B * H * S * (S + 1) * D,
    bytes=lambda B, H, S, D, itemsize: 4 * B * H * S * D * itemsize,
)
attention.onnx_model("attention.onnx")

BLOCK_M, BLOCK_N = 32, 32


@triton.jit
def _attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, H, S, D, scale,
    sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sob, soh, sos, sod,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    WIDEN: tl.constexpr, PRECISION: tl.constexpr,
):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    q_ptr += b * sqb + h * sqh
    k_ptr += b * skb + h * skh
    v_ptr += b * svb + h * svh
    o_ptr += b * sob + h * soh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    q = tl.load(q_ptr + offs_m[:, None] * sqs + offs_d[None, :] * sqd, mask=(offs_m[:, None] < S) & d_ok[None, :], other=0.0)
    if WIDEN:
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    # Keys past the last query of this block are all in the future: stop at the diagonal.
    hi = tl.minimum((start_m + 1) * BLOCK_M, S)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_ptr + cols[None, :] * sks + offs_d[:, None] * skd, mask=(cols[None, :] < S) & d_ok[:, None], other=0.0)
        v = tl.load(v_ptr + cols[:, None] * svs + offs_d[None, :] * svd, mask=(cols[:, None] < S) & d_ok[None, :], other=0.0)
        if WIDEN:
            k = k.to(tl.float32)
        qk = tl.dot(q, k, input_precision=PRECISION) * scale
        # Key 0 is visible to every row (padding rows included), so each row's max is finite after block 0.
        visible = (cols[None, :] <= offs_m[:, None]) & (cols[None, :] < S)
        qk = tl.where(visible, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        p = p.to(v_ptr.dtype.element_ty)
        if WIDEN:
            p = p.to(tl.float32)
            v = v.to(tl.float32)
        acc = tl.dot(p, v, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + offs_m[:, None] * sos + offs_d[None, :] * sod, out.to(o_ptr.dtype.element_ty), mask=(offs_m[:, None] < S) & d_ok[None, :])


def _interpreted(kernel: object) -> bool:
    return type(kernel).__name__ == "InterpretedFunction"


@attention.implementation("triton")
def attention_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    B, H, S, D = q.shape
    o = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    widen = q.dtype == torch.bfloat16 and _interpreted(_attention_kernel)
    grid = (triton.cdiv(S, BLOCK_M), B * H)
    _attention_kernel[grid](
        q, k, v, o, H, S, D, 1.0 / math.sqrt(D),
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=max(16, triton.next_power_of_2(D)), WIDEN=widen,
        PRECISION="ieee" if (q.dtype == torch.float32 or widen) else "tf32",
    )
    return o


@attention.implementation("torch")
def attention_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    half = q.dtype in (torch.float16, torch.bfloat16)
    qf, kf, vf = (t.float() for t in (q, k, v)) if half else (q, k, v)
    S, D = q.shape[-2], q.shape[-1]
    scores = (qf @ kf.transpose(-2, -1)) / math.sqrt(D)
    future = torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vf).to(q.dtype)
