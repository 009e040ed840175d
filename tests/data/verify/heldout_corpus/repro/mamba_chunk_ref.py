"""The spec's plain-torch reference of mamba_chunk_scan (mamba_ssd.py's _chunk_scan_ref), importable by the repro
scripts without importing opgate."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def chunk_scan_ref(x, dt, A, B, C, D, dt_bias):
    step = F.softplus(dt + dt_bias)
    cum = torch.cumsum(step * A, dim=1).transpose(1, 2)
    seg = cum[..., :, None] - cum[..., None, :]
    causal = torch.ones(seg.shape[-2:], dtype=torch.bool, device=seg.device).tril()
    decay = torch.exp(seg.masked_fill(~causal, float("-inf")))
    cb = torch.einsum("btn,bsn->bts", C[:, :, 0], B[:, :, 0])
    weights = decay * cb[:, None] * step.transpose(1, 2)[:, :, None, :]
    y = torch.einsum("bhts,bshp->bthp", weights.to(x.dtype), x) + D[:, None] * x
    return y.to(x.dtype)
