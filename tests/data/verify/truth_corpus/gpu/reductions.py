"""GPU truth corpus: row sums of an (M, N) view in CUDA C (NVRTC through CuPy, -ftz=true by CuPy's default).

Correct
- good_rowsum_smem: per-thread strided partials, a shared-memory tree with __syncthreads between levels; float16
  I/O accumulates in float32.
- good_rowsum_warp_shuffle: __shfl_down_sync inside each warp, one partial per warp through shared memory.
- good_rowsum_nvcc_ftz: the shared-memory kernel from an nvcc -ftz=true cubin.
All flush subnormal inputs (the spec allows it: a documented ftz deviation in the tiny regime).

Buggy
- bad_rowsum_half_accumulate: float16 rows summed with half adds (__hadd-style add.rn.f16) at every step.
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


rowsum = opgate.Operator(
    "rowsum",
    reference=lambda x: x.sum(dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [64, 7], "N": [1024, 1000]},
    dtypes=["float32", "float16"],
)


def _run(x: torch.Tensor, f32_module, f32_kernel: str, f16_kernel: str = "rowsum_f16_floatacc") -> torch.Tensor:
    g = _glue()
    M, N = x.shape
    y = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return y
    if N == 0:
        return y.zero_()
    if x.dtype == torch.float16:
        module, kernel = g.nvrtc_module("corpus_f16"), f16_kernel
        xv, yv = g.view(x.view(torch.int16)), g.view(y.view(torch.int16))  # 16-bit patterns
    else:
        module, kernel = f32_module, f32_kernel
        xv, yv = g.view(x), g.view(y)
    g.launch(module, kernel, (M,), (g.ROW_THREADS,), (xv, yv, g.i64(N), g.i64(x.stride(0)), g.i64(x.stride(1))))
    return y


@rowsum.implementation("good_rowsum_smem", backend="torch")
def good_rowsum_smem(x):
    return _run(x, _glue().nvrtc_module("corpus_f32"), "rowsum_smem")


@rowsum.implementation("good_rowsum_warp_shuffle", backend="torch")
def good_rowsum_warp_shuffle(x):
    return _run(x, _glue().nvrtc_module("corpus_f32"), "rowsum_warp")


@rowsum.implementation("good_rowsum_nvcc_ftz", backend="torch")
def good_rowsum_nvcc_ftz(x):
    return _run(x, _glue().cubin_module("corpus_f32", "ftz"), "rowsum_smem")


@rowsum.implementation("bad_rowsum_half_accumulate", backend="torch")
def bad_rowsum_half_accumulate(x):
    return _run(x, _glue().nvrtc_module("corpus_f32"), "rowsum_smem", f16_kernel="rowsum_f16_halfacc")
