"""Repro of opgate's FAIL [layout] on fla.ops.utils.softmax_fwd / softmax_bwd / logsumexp_fwd (float32), and the
NaN that logsumexp_fwd returns for a fully masked row.

    TRITON_INTERPRET=1 python repro/fla_ops_utils_layout.py      # CPU; the same on a GPU without TRITON_INTERPRET

The three helpers (exported in fla.ops.utils.__all__) do `x.view(-1, x.shape[-1])` and index the rows as if they
were contiguous; they carry no @input_guard (which makes fla's other entry points' inputs contiguous). A transposed
view (a legal input: .view() succeeds on it) is then read with the wrong strides, silently. opgate's cases:
  softmax_fwd   M=2,N=2 seed=30 typical transposed: got 0.0728456, truth 0.00631839 at [1, 0]
  softmax_bwd   M=2,N=2 seed=26 typical transposed: got -0.257986, truth 0.0548278 at [0, 0]
  logsumexp_fwd M=2,N=1 seed=29 masked contiguous: got nan, truth -inf at [1]
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _corpus_env import interpreter_autotune_first_config  # noqa: E402

interpreter_autotune_first_config()

import torch  # noqa: E402
from fla.ops.utils import logsumexp_fwd, softmax_bwd, softmax_fwd  # noqa: E402

base = torch.tensor([[0.5, -2.0], [3.0, 1.0]], dtype=torch.float32)
x = base.t()  # transposed view: x = [[0.5, 3.0], [-2.0, 1.0]], strides (1, 2)
print("x (transposed view):", x.tolist(), "stride", x.stride(), "contiguous", x.is_contiguous())
print("softmax_fwd(x)           :", softmax_fwd(x).tolist())
print("softmax_fwd(x.contiguous()):", softmax_fwd(x.contiguous()).tolist())
print("torch.softmax(x) float64 :", torch.softmax(x.double(), -1).tolist())

p = torch.softmax(x.double(), -1).float()
dp = torch.tensor([[1.0, -1.0], [0.25, 2.0]]).t()  # transposed view too
truth = (p.double() * (dp.double() - (p.double() * dp.double()).sum(-1, keepdim=True)))
print("softmax_bwd(p, dp^T view):", softmax_bwd(p, dp).tolist())
print("float64 p*(dp - sum p dp):", truth.tolist())

print("logsumexp_fwd(x view)    :", logsumexp_fwd(x).tolist(), " torch float64:",
      torch.logsumexp(x.double(), -1).tolist())

masked = torch.tensor([[1.0, 2.0, float("-inf")], [float("-inf")] * 3])
print("logsumexp_fwd(row of -inf):", logsumexp_fwd(masked).tolist(), " torch:",
      torch.logsumexp(masked.double(), -1).tolist())
