"""Held-out corpus: unsloth 2026.10.9 Triton RoPE and gated MLP activations (unsloth.kernels), forward and gradients.

- unsloth_rope: rope_embedding.fast_rope_embedding(Q, K, cos, sin) as LlamaAttention's forward calls it
  (models/llama.py): Q (batch, n_heads, seq_len, head_dim) and K (batch, n_kv_heads, seq_len, head_dim), cos and sin
  the rotary cache (seq_len, head_dim) in Q's dtype; returns (Q cos + rotate_half(Q) sin, the same for K) with
  rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]) (transformers' apply_rotary_pos_emb). cos and sin are Llama's
  table for positions 0..S-1 (base 10000, the half-dim frequencies repeated), made inside the spec from S and D.
  The Function's docstring says it writes into Q and K when X.transpose(1, 2) is contiguous, so the wrapper hands
  it copies (clone keeps the strides). head_dim D = 2 R (derived); gradients for Q and K.
- unsloth_swiglu: swiglu.swiglu_fg_kernel(e, g) = silu(e) g (LlamaMLP's act(gate) * up), with the library's backward
  kernel swiglu_DWf_DW_dfg_kernel(DW, e, g), which returns (h, df, de) in place of (DW, e, g) for 2-D (rows, hd)
  tensors: df = DW silu(e) is the gradient of up (g), de the gradient of gate (e) (how LoRA_MLP.backward uses them,
  fast_lora.py). No autograd.Function ships for the pair alone, so the spec wraps them in one, as LoRA_MLP does.
  Both kernels index flat memory (n_elements) and are fed matmul outputs: contiguous inputs only.
- unsloth_geglu_exact: geglu.geglu_exact_forward_kernel(gate, up) = gelu(gate) up (erf GELU, hidden_act "gelu"),
  with geglu_exact_backward_kernel(DW, e, g), the same contract; contiguous inputs only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import opgate

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the spec's folder: _unsloth_env.py
import _unsloth_env  # noqa: E402, F401  (bare unsloth packages and interpreter shims on a CPU machine)
from unsloth.kernels.geglu import geglu_exact_backward_kernel, geglu_exact_forward_kernel  # noqa: E402
from unsloth.kernels.rope_embedding import fast_rope_embedding  # noqa: E402
from unsloth.kernels.swiglu import swiglu_DWf_DW_dfg_kernel, swiglu_fg_kernel  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16"]
ROPE_BASE = 10000.0


# ---------------------------------------------------------------- RoPE on Q and K
def rope_cos_sin(seq_len, head_dim, dtype, device):
    """Llama's rotary cache for positions 0..seq_len-1, computed in float64 and cast to the dtype (as the model casts
    its cache to Q's dtype)."""
    inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim))
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float64, device=device), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope_ref(q, k):
    cos, sin = rope_cos_sin(q.shape[2], q.shape[3], q.dtype, q.device)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


unsloth_rope = opgate.Operator(
    "unsloth_rope",
    reference=_rope_ref,
    inputs=[
        opgate.TensorSpec("q", ("B", "H", "S", "D"), requires_grad=True),
        opgate.TensorSpec("k", ("B", "HK", "S", "D"), requires_grad=True),
    ],
    dims={"B": [2, 1], "H": [8, 5], "HK": [2, 1], "S": [64, 17], "R": [64, 32]},  # R: half the head dim
    derived_dims={"D": lambda R: 2 * R},
    dtypes=DTYPES,
    perf_dims={"B": 4, "H": 32, "HK": 8, "S": 4096, "R": 64},
)


@unsloth_rope.implementation("unsloth_fast_rope_embedding", backend="triton")
def _unsloth_rope(q, k):
    cos, sin = rope_cos_sin(q.shape[2], q.shape[3], q.dtype, q.device)
    return fast_rope_embedding(q.clone(), k.clone(), cos, sin)


# ---------------------------------------------------------------- gated activations (forward + backward kernels)
class _GatedKernels(torch.autograd.Function):
    """forward(e, g) -> h with the library's forward kernel; backward with its (DW, e, g) -> (h, df, de) kernel."""

    @staticmethod
    def forward(ctx, e, g, forward_kernel, backward_kernel):
        ctx.save_for_backward(e, g)
        ctx.backward_kernel = backward_kernel
        return forward_kernel(e, g)

    @staticmethod
    def backward(ctx, dh):
        e, g = ctx.saved_tensors
        hd = e.shape[-1]
        # the backward kernel overwrites all three: hand it copies of the saved tensors and of dh.
        DW = dh.reshape(-1, hd).contiguous().clone()
        _h, df, de = ctx.backward_kernel(DW, e.reshape(-1, hd).clone(), g.reshape(-1, hd).clone())
        return de.view(e.shape), df.view(g.shape), None, None


def _gated_inputs():
    return [
        opgate.TensorSpec("gate", ("B", "S", "N"), contiguous=True, requires_grad=True),
        opgate.TensorSpec("up", ("B", "S", "N"), contiguous=True, requires_grad=True),
    ]


GATED_DIMS = {"B": [2, 1], "S": [8, 3], "N": [2048, 1000]}  # N: MLP intermediate size
GATED_PERF = {"B": 4, "S": 2048, "N": 14336}

unsloth_swiglu = opgate.Operator(
    "unsloth_swiglu",
    reference=lambda gate, up: F.silu(gate) * up,
    inputs=_gated_inputs(),
    dims=GATED_DIMS,
    dtypes=DTYPES,
    perf_dims=GATED_PERF,
)


@unsloth_swiglu.implementation("unsloth_swiglu_kernels", backend="triton")
def _unsloth_swiglu(gate, up):
    return _GatedKernels.apply(gate, up, swiglu_fg_kernel, swiglu_DWf_DW_dfg_kernel)


unsloth_geglu_exact = opgate.Operator(
    "unsloth_geglu_exact",
    reference=lambda gate, up: F.gelu(gate) * up,
    inputs=_gated_inputs(),
    dims=GATED_DIMS,
    dtypes=DTYPES,
    perf_dims=GATED_PERF,
)


@unsloth_geglu_exact.implementation("unsloth_geglu_exact_kernels", backend="triton")
def _unsloth_geglu_exact(gate, up):
    return _GatedKernels.apply(gate, up, geglu_exact_forward_kernel, geglu_exact_backward_kernel)
