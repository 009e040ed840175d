"""Library corpus: FlagGems 5.0.2 cross-entropy, cumsum and rotary embedding (GPU only, see flaggems_norms.py).

- gems_cross_entropy: flag_gems.cross_entropy_loss(logits, target, reduction="mean", ignore_index=-100,
  label_smoothing=0.1) (its autograd.Function; the semantics of F.cross_entropy): rows 1, 4, 7, ... ignored,
  labels meet the argmax of their logits half the time; gradient for the logits.
- gems_cumsum: torch.cumsum(x, -1) through `only_enable(include=["cumsum"])` (the backward of cumsum is a reversed
  cumsum, so FlagGems' kernel runs there too); gradient for x. Note: FlagGems' NVIDIA backend lists cumsum among
  its CUSTOMIZED_UNUSED_OPS, so flag_gems.enable() leaves it out there; only_enable registers it.
- gems_rotary: flag_gems.apply_rotary_pos_emb(q, k, cos, sin, position_ids) (GPT-NeoX halves, not interleaved):
  q [T, Hq, D], k [T, Hk, D], caches [S, D/2] indexed by position_ids [T]; forward only (returns (q, k)).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import flag_gems
import opgate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _corpus_env import every_third_row_ignored  # noqa: E402

flag_gems.only_enable(include=["cumsum"])

DTYPES = ["float32", "float16", "bfloat16"]


def _ce_ref(logits, labels):
    return F.cross_entropy(logits, every_third_row_ignored(labels), reduction="mean", ignore_index=-100,
                           label_smoothing=0.1)


gems_cross_entropy = opgate.Operator(
    "gems_cross_entropy",
    reference=_ce_ref,
    inputs=[
        opgate.TensorSpec("logits", ("M", "V"), kind="logits", requires_grad=True),
        opgate.TensorSpec("labels", ("M",), dtype="int64", kind="index", high="V", hits="logits"),
    ],
    dims={"M": [64, 7], "V": [32000, 4099]},
    dtypes=DTYPES,
    perf_dims={"M": 8192, "V": 128256},
)


@gems_cross_entropy.implementation("gems_cross_entropy", backend="triton")
def _gems_cross_entropy(logits, labels):
    return flag_gems.cross_entropy_loss(logits, every_third_row_ignored(labels), reduction="mean",
                                        ignore_index=-100, label_smoothing=0.1)


gems_cumsum = opgate.Operator(
    "gems_cumsum",
    reference=lambda x: torch.cumsum(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), requires_grad=True)],
    dims={"M": [64, 7], "N": [4096, 1000, 32768]},
    dtypes=DTYPES,
    perf_dims={"M": 4096, "N": 32768},
)


@gems_cumsum.implementation("gems_cumsum", backend="triton")
def _gems_cumsum(x):
    return torch.cumsum(x, dim=-1)


def _rope(x, cos, sin):  # x [T, H, D]; cos/sin [T, D/2]
    c = torch.cat([cos, cos], dim=-1)[:, None, :]
    s = torch.cat([sin, sin], dim=-1)[:, None, :]
    x1, x2 = x.chunk(2, dim=-1)
    return x * c + torch.cat([-x2, x1], dim=-1) * s


def _rotary_ref(q, k, cos, sin, pos):
    c, s = cos[pos], sin[pos]
    return _rope(q, c, s), _rope(k, c, s)


gems_rotary = opgate.Operator(
    "gems_rotary",
    reference=_rotary_ref,
    inputs=[
        opgate.TensorSpec("q", ("T", "Hq", "D")),
        opgate.TensorSpec("k", ("T", "Hk", "D")),
        opgate.TensorSpec("cos", ("S", "R"), kind="uniform", low=-1.0, high=1.0),
        opgate.TensorSpec("sin", ("S", "R"), kind="uniform", low=-1.0, high=1.0),
        opgate.TensorSpec("pos", ("T",), dtype="int64", kind="index", high="S"),
    ],
    dims={"T": [256, 31], "Hq": [32, 8], "Hk": [8, 2], "D": [128, 64], "S": [4096, 300]},
    derived_dims={"R": lambda D: D // 2},
    exact_dims=["D"],
    dtypes=DTYPES,
    perf_dims={"T": 16384, "Hq": 32, "Hk": 8, "D": 128, "S": 8192},
)


@gems_rotary.implementation("gems_rotary", backend="triton")
def _gems_rotary(q, k, cos, sin, pos):
    return flag_gems.apply_rotary_pos_emb(q, k, cos, sin, position_ids=pos, rotary_interleaved=False)
