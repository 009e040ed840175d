"""GPU truth corpus: bugs only a memory or race checker sees (run with the sanitizer stage).

- good_scale2_exact: the in-bounds kernel.
- bad_scale2_oob_write: writes one float past the end of its output; every value it returns is right. PyTorch's
  caching allocator hands out sub-blocks of bigger segments, so the stray write lands in memory the allocator owns
  and memcheck sees nothing unless caching is off (PYTORCH_NO_CUDA_MEMORY_CACHING=1).
- bad_rowsum_missing_syncthreads: a shared-memory row sum without __syncthreads between the store phase and the tree
  levels: a read-after-write race racecheck reports; its values are wrong only when warps interleave badly.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

import opgate


def _glue():
    name = "opgate_truth_corpus_cuda_glue"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / "_cuda_glue.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


scale2 = opgate.Operator(
    "scale2",
    reference=lambda x: 2 * x,
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [64, 7], "N": [1024, 1000]},
    dtypes=["float32"],
)

rowsum = opgate.Operator(
    "rowsum",
    reference=lambda x: x.sum(dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [64, 7], "N": [1024, 1000]},
    dtypes=["float32"],
)

THREADS = 256


def _scale2(x, kernel: str, extra: int):
    g = _glue()
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    n = M * N
    if n == 0:
        return y
    blocks = (n + extra + THREADS - 1) // THREADS
    g.launch(g.nvrtc_module("corpus_f32"), kernel, (blocks,), (THREADS,),
             (g.view(x), g.view(y), g.i64(M), g.i64(N), g.i64(x.stride(0)), g.i64(x.stride(1))))
    return y


@scale2.implementation("good_scale2_exact", backend="torch")
def good_scale2_exact(x):
    return _scale2(x, "scale2", 0)


@scale2.implementation("bad_scale2_oob_write", backend="torch")
def bad_scale2_oob_write(x):
    return _scale2(x, "scale2_oob", 1)


@rowsum.implementation("bad_rowsum_missing_syncthreads", backend="torch")
def bad_rowsum_missing_syncthreads(x):
    g = _glue()
    M, N = x.shape
    y = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return y
    if N == 0:
        return y.zero_()
    g.launch(g.nvrtc_module("corpus_f32"), "rowsum_smem_nosync", (M,), (g.ROW_THREADS,),
             (g.view(x), g.view(y), g.i64(N), g.i64(x.stride(0)), g.i64(x.stride(1))))
    return y
