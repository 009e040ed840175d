"""Triton 3.9.0's interpreter (TRITON_INTERPRET=1, numpy on the CPU) computes tl.dot of bfloat16 operands from their
raw 16-bit patterns: ones(16, 16) @ ones(16, 16) gives 4.228e9 (= 0x3F80^2 x 16) instead of 16. Not a mamba-ssm or
opgate defect; it explains why repro/chunk_scan_nonfinite_range_strided.py's bfloat16 line (outside opgate) returns
finite garbage, while opgate's bfloat16 mamba_chunk_scan checks did not (opgate's run is not affected; how it avoids
this was not looked at: its judging code is out of bounds for this corpus).

Run:  TRITON_INTERPRET=1 /work/heldvenv/bin/python tests/data/verify/heldout_corpus/repro/interpreter_bf16_dot.py
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _dot_row_max(x_ptr, w_ptr, z_ptr):
    r = tl.arange(0, 16)
    a = tl.load(x_ptr + r[:, None] * 16 + r[None, :])
    b = tl.load(w_ptr + r[:, None] * 16 + r[None, :])
    tl.store(z_ptr + r, tl.max(tl.dot(a, b), 1))


if __name__ == "__main__":
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.ones(16, 16, dtype=dtype)
        w = torch.ones(16, 16, dtype=dtype)
        z = torch.empty(16, dtype=torch.float32)
        _dot_row_max[(1,)](x, w, z)
        print(f"{str(dtype):15s} tl.dot(ones, ones) row max: {z[0].item():.6g} (torch: 16)")
