"""Repro (no opgate): fla's logsigmoid loses the value of log(sigmoid(x)) for x above ~5 in float32.

    TRITON_INTERPRET=1 python repro/fla_logsigmoid_large_x.py   # CPU; on a GPU drop TRITON_INTERPRET

opgate on the H200 (default budget, `--op fla_logsigmoid --dtype float32`) failed it `[precision]`: "sampled elements
up to 5.66e+03x their own bound ... breaks at inputs of |x| >= 5.74 (bisected)", worst at a truth of -1.41e-38
returned as 0. The kernel (fla/modules/activations/ops.py, logsigmoid_fwd_kernel) computes
min(0, x) - log(1 + exp(-|x|)) in float32: for x > 0 the result is -log(1 + e^-x), and 1 + e^-x rounds to a
float32 near 1, so the result keeps only the absolute accuracy of that rounding (~6e-8), not the relative accuracy
of its own tiny value; for x > ~16.6 it is exactly 0 (truth -e^-x). PyTorch's F.logsigmoid uses log1p and keeps
float32's relative accuracy. The gradient kernel (1 - sigmoid(x)) has the same cancellation for x > 0 large.

Output of this script on the 2-core CPU (Triton 3.9 interpreter, fla-core 0.6.0, 2026-12-02), relative error
against float64 (| fla - truth | / |truth|, and PyTorch float32's):

  x =      1 fla 9.4e-08  torch 7.6e-10
  x =   5.74 fla 1.6e-05  torch 3.4e-08
  x =     10 fla 4.1e-04  torch 4.9e-08
  x =     16 fla 5.9e-02  torch 3.1e-09
  x =     20 fla 1.0e+00  torch 3.5e-08
  x =   87.2 fla 1.0e+00  torch 5.1e-08
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _corpus_env import interpreter_autotune_first_config  # noqa: E402

interpreter_autotune_first_config()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from fla.modules.activations import logsigmoid  # noqa: E402

device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
points = [1.0, 5.74, 10.0, 16.0, 20.0, 87.2]
x = torch.tensor([points], dtype=torch.float32, device=device)
truth = F.logsigmoid(x.double().cpu())[0]
ours = logsigmoid(x, 1.0).double().cpu()[0]
eager = F.logsigmoid(x).double().cpu()[0]
for value, t, o, e in zip(points, truth, ours, eager):
    print(f"  x = {value:6g} fla {float((o - t).abs() / t.abs()):.1e}  torch {float((e - t).abs() / t.abs()):.1e}")
