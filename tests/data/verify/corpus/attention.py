"""Corpus: causal attention. Two correct implementations and two buggy ones (see BUGS)."""

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
    inputs=[opgate.TensorSpec(n, ("B", "H", "S", "D")) for n in ("q", "k", "v")],
    dims={"B": [1, 2], "H": [2, 3], "S": [64, 100, 63], "D": [32]},
    dtypes=["float32", "float16"],
    # 0 * NaN in P @ V lets a NaN in a future V row reach rows that cannot see it, in SDPA and in blocked kernels
    # alike, at places set by the blocking: no NaN injection for this operator (see examples/ops/attention.py).
    propagates_nonfinite=False,
)

BUGS = {
    "bad_attention_no_acc_rescale": {"kind": "online-softmax rescale", "exposed_by": {"dims": {"S": 100}}},
    "bad_attention_causal_padded_offset": {"kind": "causal off-by-one", "exposed_by": {"dims": {"S": 63}}},
}

BLOCK = 64


@triton.jit
def _attention(
    q_ptr, k_ptr, v_ptr, o_ptr, H, S, D, scale,
    sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sob, soh, sos, sod,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    RESCALE_ACC: tl.constexpr, PADDED_DIAGONAL: tl.constexpr, PRECISION: tl.constexpr,
):
    start_m = tl.program_id(0)
    b = (tl.program_id(1) // H).to(tl.int64)
    h = (tl.program_id(1) % H).to(tl.int64)
    q_ptr += b * sqb + h * sqh
    k_ptr += b * skb + h * skh
    v_ptr += b * svb + h * svh
    o_ptr += b * sob + h * soh
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    q = tl.load(q_ptr + offs_m[:, None] * sqs + offs_d[None, :] * sqd, mask=(offs_m[:, None] < S) & d_ok[None, :], other=0.0)
    if PADDED_DIAGONAL:
        # Meant as bottom-right alignment (diagonal = S_k - S_q = 0 here), but S_k is taken as the padded length.
        diagonal = tl.cdiv(S, BLOCK_N) * BLOCK_N - S
    else:
        diagonal = 0
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    hi = tl.minimum((start_m + 1) * BLOCK_M, S)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_ptr + cols[None, :] * sks + offs_d[:, None] * skd, mask=(cols[None, :] < S) & d_ok[:, None], other=0.0)
        v = tl.load(v_ptr + cols[:, None] * svs + offs_d[None, :] * svd, mask=(cols[:, None] < S) & d_ok[None, :], other=0.0)
        qk = tl.dot(q, k, input_precision=PRECISION) * scale
        visible = (cols[None, :] <= offs_m[:, None] + diagonal) & (cols[None, :] < S)
        qk = tl.where(visible, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if RESCALE_ACC:
            acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v_ptr.dtype.element_ty), v, acc, input_precision=PRECISION)
        m_i = m_new
    tl.store(o_ptr + offs_m[:, None] * sos + offs_d[None, :] * sod, (acc / l_i[:, None]).to(o_ptr.dtype.element_ty), mask=(offs_m[:, None] < S) & d_ok[None, :])


def _launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int, rescale_acc: bool = True, padded_diagonal: bool = False) -> torch.Tensor:
    B, H, S, D = q.shape
    o = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    _attention[(triton.cdiv(S, block), B * H)](
        q, k, v, o, H, S, D, 1.0 / math.sqrt(D), *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        BLOCK_M=block, BLOCK_N=block, BLOCK_D=max(16, triton.next_power_of_2(D)),
        RESCALE_ACC=rescale_acc, PADDED_DIAGONAL=padded_diagonal,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )
    return o


@attention.implementation("good_attention_triton", backend="triton")
def good_attention_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Correct: flash-style forward with 32 x 32 blocks; rescales both the running sum and the accumulator."""
    return _launch(q, k, v, block=32)


@attention.implementation("good_attention_torch", backend="torch")
def good_attention_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Correct: scores, -inf strictly above the diagonal, softmax, @ V, in float32."""
    qf, kf, vf = q.float(), k.float(), v.float()
    S = q.shape[-2]
    scores = (qf @ kf.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vf).to(q.dtype)


@attention.implementation("bad_attention_no_acc_rescale", backend="triton")
def bad_attention_no_acc_rescale(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Bug: online softmax that rescales the running sum but not the output accumulator when the row max grows.

    Exact while every query sees a single key block of 64 (the happy S=64); for S=100 (declared) or 65 the queries
    of the second block mix P @ V terms taken against different maxima.
    """
    return _launch(q, k, v, block=BLOCK, rescale_acc=False)


@attention.implementation("bad_attention_causal_padded_offset", backend="triton")
def bad_attention_causal_padded_offset(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Bug: causal mask j <= i + (S_pad - S), the bottom-right offset computed from the key length padded to 64.

    Exact when S is a multiple of 64 (the happy S=64); at S=63 (2^k - 1, a fuzzer edge; also declared) every query
    also sees one future key: an off-by-one in the causal mask. Larger pads leak more (S=100: 28 keys).
    """
    return _launch(q, k, v, block=BLOCK, padded_diagonal=True)
