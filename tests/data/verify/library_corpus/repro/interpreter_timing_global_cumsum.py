"""Timing of the case that made opgate's fla_global_cumsum checks time out on the CPU (300 s per check).

    TRITON_INTERPRET=1 python repro/interpreter_timing_global_cumsum.py

opgate adds H = 16385 (2^14 + 1) to the quick plan; chunk_global_cumsum launches one program per (batch, head), so
the Triton interpreter runs 16385 Python-level programs for a tensor of 16385 elements. The declared sizes take
well under a second. Prints the time of one call at each size and the error against float64.
"""

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _corpus_env import interpreter_autotune_first_config  # noqa: E402

interpreter_autotune_first_config()

import torch  # noqa: E402
from fla.ops.utils import chunk_global_cumsum  # noqa: E402

for shape in [(2, 256, 4), (1, 1000, 3), (1, 1, 1025), (1, 1, 16385)]:
    s = torch.randn(*shape)
    t0 = time.time()
    out = chunk_global_cumsum(s)
    dt = time.time() - t0
    err = float((out.double() - s.double().cumsum(1)).abs().max())
    print(f"B,T,H={shape}: {dt:.1f} s, max|err| {err:.2g}", flush=True)
