"""Held-out corpus: mamba-ssm 2.3.2.post1 Triton selective-state-space kernels (Mamba2's SSD), per their docstrings.

- mamba_selective_state_update: selective_state_update.selective_state_update(state, x, dt, A, B, C, D, z, dt_bias,
  dt_softplus=True), one decoding step of the multi-head form (state (batch, nheads, headdim, dstate), B and C
  (batch, ngroups=1, dstate)): dt' = softplus(dt + dt_bias), state <- state * exp(dt' A) + dt' B x,
  out = (sum_n state C + D x) * silu(z). The library updates `state` in place; the spec passes it a copy and
  returns (out, new state). Forward only (the function has no backward: it is the inference path).
- mamba_chunk_scan: ssd_combined.mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size=64, D, dt_bias,
  dt_softplus=True), the chunked SSD scan of Mamba2's training path (MambaChunkScanCombinedFn):
  h_t = exp(dt'_t A) h_{t-1} + dt'_t x_t B_t^T, y_t = h_t C_t + D x_t, h_0 = 0, written here in its quadratic
  (attention-like) form; sequence lengths that are not a multiple of the chunk size; gradients for x, dt, A, B, C,
  D and dt_bias.

A, D and dt_bias are float32 as in Mamba2 (its A_log, D and dt_bias parameters are kept in float32); A is
negative (-exp(A_log), A_log initialised from log U[1, 16]); dt_bias is the inverse softplus of a step in
[0.001, 0.1] in Mamba2's initialisation, here U[-5, -1].
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import opgate

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the spec's folder: _mamba_env.py
import _mamba_env  # noqa: E402, F401  (bare mamba_ssm package and CUDA-query shims on a CPU machine)
from mamba_ssm.ops.triton.selective_state_update import selective_state_update  # noqa: E402
from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16"]


# ---------------------------------------------------------------- one decoding step
def _state_update_ref(state, x, dt, A, B, C, D, z, dt_bias):
    step = F.softplus(dt + dt_bias)[..., None]                       # (batch, H, P, 1)
    new_state = state * torch.exp(step * A) + step * B[:, :, None, :] * x[..., None]
    out = (new_state * C[:, :, None, :]).sum(-1) + D * x
    return (out * F.silu(z)).to(x.dtype), new_state.to(state.dtype)


mamba_selective_state_update = opgate.Operator(
    "mamba_selective_state_update",
    reference=_state_update_ref,
    inputs=[
        opgate.TensorSpec("state", ("batch", "H", "P", "N")),
        opgate.TensorSpec("x", ("batch", "H", "P")),
        opgate.TensorSpec("dt", ("batch", "H", "P")),
        opgate.TensorSpec("A", ("H", "P", "N"), dtype="float32", kind="uniform", low=-16.0, high=-1.0),
        opgate.TensorSpec("B", ("batch", 1, "N")),
        opgate.TensorSpec("C", ("batch", 1, "N")),
        opgate.TensorSpec("D", ("H", "P"), dtype="float32"),
        opgate.TensorSpec("z", ("batch", "H", "P")),
        opgate.TensorSpec("dt_bias", ("H", "P"), dtype="float32", kind="uniform", low=-5.0, high=-1.0),
    ],
    dims={"batch": [2, 5], "H": [4, 3], "P": [64, 48], "N": [128, 16]},  # Mamba2 dstate 128, Mamba1 16
    dtypes=DTYPES,
    perf_dims={"batch": 64, "H": 48, "P": 64, "N": 128},
)


@mamba_selective_state_update.implementation("mamba_selective_state_update", backend="triton")
def _mamba_selective_state_update(state, x, dt, A, B, C, D, z, dt_bias):
    new_state = state.clone()
    out = selective_state_update(new_state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=True)
    return out, new_state


# ---------------------------------------------------------------- the chunked SSD scan, training path
CHUNK = 64


def _chunk_scan_ref(x, dt, A, B, C, D, dt_bias):
    step = F.softplus(dt + dt_bias)                                   # (batch, L, H)
    cum = torch.cumsum(step * A, dim=1).transpose(1, 2)               # (batch, H, L)
    seg = cum[..., :, None] - cum[..., None, :]                       # (batch, H, t, s): sum of dt' A over (s, t]
    causal = torch.ones(seg.shape[-2:], dtype=torch.bool, device=seg.device).tril()
    decay = torch.exp(seg.masked_fill(~causal, float("-inf")))
    cb = torch.einsum("btn,bsn->bts", C[:, :, 0], B[:, :, 0])         # (batch, t, s), one group
    weights = decay * cb[:, None] * step.transpose(1, 2)[:, :, None, :]  # (batch, H, t, s)
    y = torch.einsum("bhts,bshp->bthp", weights.to(x.dtype), x) + D[:, None] * x  # einsum needs one dtype
    return y.to(x.dtype)


mamba_chunk_scan = opgate.Operator(
    "mamba_chunk_scan",
    reference=_chunk_scan_ref,
    inputs=[
        opgate.TensorSpec("x", ("batch", "L", "H", "P"), requires_grad=True),
        opgate.TensorSpec("dt", ("batch", "L", "H"), requires_grad=True),
        opgate.TensorSpec("A", ("H",), dtype="float32", kind="uniform", low=-16.0, high=-1.0, requires_grad=True),
        opgate.TensorSpec("B", ("batch", "L", 1, "N"), requires_grad=True),
        opgate.TensorSpec("C", ("batch", "L", 1, "N"), requires_grad=True),
        opgate.TensorSpec("D", ("H",), dtype="float32", requires_grad=True),
        opgate.TensorSpec("dt_bias", ("H",), dtype="float32", kind="uniform", low=-5.0, high=-1.0,
                          requires_grad=True),
    ],
    dims={"batch": [1, 2], "L": [100, 64], "H": [3], "P": [32, 64], "N": [16, 64]},
    dtypes=DTYPES,
    perf_dims={"batch": 8, "L": 2048, "H": 24, "P": 64, "N": 128},
)


@mamba_chunk_scan.implementation("mamba_chunk_scan_combined", backend="triton")
def _mamba_chunk_scan(x, dt, A, B, C, D, dt_bias):
    return mamba_chunk_scan_combined(x, dt, A, B, C, CHUNK, D=D, dt_bias=dt_bias, dt_softplus=True)
