"""Standalone reproduction (outside opgate) of opgate's FAIL [crash] on mamba_chunk_scan (every dtype, forward and
backward): mamba_ssm 2.3.2.post1 mamba_chunk_scan_combined on an empty sequence (seqlen 0) kills the process
with SIGSEGV under TRITON_INTERPRET=1 (opgate's case batch=1, L=0, H=3, P=32, N=16). The plain-torch reference
returns an empty (1, 0, 3, 32) tensor.

Run:  TRITON_INTERPRET=1 /work/heldvenv/bin/python tests/data/verify/heldout_corpus/repro/chunk_scan_empty_sequence_segfault.py

The call runs in a child process so the parent can report the signal.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CHILD = f"""
import sys; sys.path.insert(0, {str(HERE)!r})
import _mamba_env, torch
from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
b, L, H, P, N = 1, int(sys.argv[1]), 3, 32, 16
x = torch.randn(b, L, H, P); dt = torch.randn(b, L, H); A = -torch.rand(H) - 1
B = torch.randn(b, L, 1, N); C = torch.randn(b, L, 1, N); D = torch.randn(H); dt_bias = -torch.rand(H) - 1
y = mamba_chunk_scan_combined(x, dt, A, B, C, 64, D=D, dt_bias=dt_bias, dt_softplus=True)
print("returned", tuple(y.shape), flush=True)
"""

if __name__ == "__main__":
    env = dict(os.environ, TRITON_INTERPRET="1")
    for seqlen in (1, 0):
        proc = subprocess.run([sys.executable, "-c", CHILD, str(seqlen)], env=env, capture_output=True, text=True,
                              timeout=300)
        outcome = proc.stdout.strip() or (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        signal = f" (signal {-proc.returncode})" if proc.returncode < 0 else ""
        print(f"seqlen {seqlen}: exit code {proc.returncode}{signal}: {outcome[:200]}")
