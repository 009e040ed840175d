"""Repro of opgate's FAIL [typical] "dtype float32 != the reference's float16/bfloat16" on fla's fp32-output ops.

    TRITON_INTERPRET=1 python repro/fla_fp32_outputs.py         # CPU; on a GPU drop TRITON_INTERPRET

fla documents these outputs as float32 whatever the input dtype (cross_entropy_loss: "FP32 loss and z-loss
tensors"; fused_linear_cross_entropy_loss / fused_kl_div_loss: "Scalar loss in fp32"; logsumexp_fwd, softmax_fwd,
softmax_bwd, chunk_*_cumsum: output dtype torch.float by default). opgate fails every case on the dtype alone, as
class "typical" (its class for a wrong result), without comparing the values. The values are more accurate than
the input dtype's own reference, as printed here (same float16/bfloat16 inputs, errors against float64).
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
from fla.modules.fused_cross_entropy import cross_entropy_loss  # noqa: E402
from fla.ops.utils import logsumexp_fwd, softmax_fwd  # noqa: E402

g = torch.Generator().manual_seed(0)
for dtype in (torch.float16, torch.bfloat16):
    logits = (torch.randn(8, 4099, generator=g) * 4).to(dtype)
    labels = torch.randint(0, 4099, (8,), generator=g)
    truth = F.cross_entropy(logits.double(), labels, reduction="none")
    fla = cross_entropy_loss(logits, labels)[0]
    eager = F.cross_entropy(logits, labels, reduction="none")
    print(f"{dtype}: CE  fla dtype {fla.dtype}, max|err| {float((fla.double() - truth).abs().max()):.3g};  "
          f"torch {eager.dtype} eager max|err| {float((eager.double() - truth).abs().max()):.3g}")
    lse_t = torch.logsumexp(logits.double(), -1)
    lse = logsumexp_fwd(logits)
    lse_e = torch.logsumexp(logits, -1)
    print(f"{dtype}: LSE fla dtype {lse.dtype}, max|err| {float((lse.double() - lse_t).abs().max()):.3g};  "
          f"torch {lse_e.dtype} eager max|err| {float((lse_e.double() - lse_t).abs().max()):.3g}")
    p_t = torch.softmax(logits.double(), -1)
    p = softmax_fwd(logits)
    p_e = torch.softmax(logits, -1)
    print(f"{dtype}: softmax fla dtype {p.dtype}, max|err| {float((p.double() - p_t).abs().max()):.3g};  "
          f"torch {p_e.dtype} eager max|err| {float((p_e.double() - p_t).abs().max()):.3g}")
