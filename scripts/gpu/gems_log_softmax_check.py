"""GPU diagnostic for the unexplained FAIL of FlagGems' log_softmax (tenth H200 session, report lost): run
flag_gems' log_softmax beside PyTorch's on the value regimes opgate plans (typical, large, masked runs of -inf at
tile sizes, fully masked rows) in float32/float16/bfloat16, and print where they differ. No opgate involved.

    PYTHONPATH=/tmp/site python3 scripts/gpu/gems_log_softmax_check.py
"""

import torch
import torch.nn.functional as F

import flag_gems

flag_gems.only_enable(include=["log_softmax", "log_softmax_backward"])


def rows(m: int, n: int, dtype: torch.dtype, regime: str) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(n)
    x = torch.randn(m, n, device="cuda", generator=gen, dtype=torch.float32)
    if regime == "large":
        x *= 60.0
    if regime == "huge":
        x *= torch.finfo(dtype).max / 64
    if regime == "tiny":
        x *= torch.finfo(dtype).tiny * 2
    if regime == "nonfinite":
        x[0, 3], x[2, 5], x[4, 7] = float("nan"), float("inf"), float("-inf")
    if regime == "masked_tail":  # opgate's masked regime: a whole run of -inf from the middle on
        x[:, n // 2 + 1:] = float("-inf")
    if regime == "masked_head":
        x[:, : n // 2] = float("-inf")
    if regime == "one_finite":
        x[:, 1:] = float("-inf")
    if regime == "all_masked":
        x[1] = float("-inf")
    return x.to(dtype)


for dtype in (torch.float32, torch.float16, torch.bfloat16):
    for n in (1000, 4096, 32000, 65537):
        for regime in ("typical", "large", "huge", "tiny", "nonfinite", "masked_tail", "masked_head", "one_finite",
                       "all_masked"):
            x = rows(7, n, dtype, regime)
            got = F.log_softmax(x, dim=-1).cpu()  # flag_gems' kernel: only_enable registered it for CUDA
            want = torch.log_softmax(x.double().cpu(), dim=-1)  # PyTorch's own, on the CPU
            fin = torch.isfinite(want)
            bad_nonfinite = int((fin & ~torch.isfinite(got)).sum())
            mismatched_special = int((~fin & (got.double() != want)).sum() - (~fin & got.isnan() & want.isnan()).sum())
            err = (got.double() - want)[fin & torch.isfinite(got)].abs()
            worst = float(err.max()) if err.numel() else 0.0
            flag = "  <--" if bad_nonfinite or mismatched_special or worst > 0.05 else ""
            print(f"{str(dtype)[6:]:9} N={n:6} {regime:12} NaN/Inf where finite: {bad_nonfinite:6}  "
                  f"special mismatches: {mismatched_special:6}  max |err| {worst:.3g}{flag}")
