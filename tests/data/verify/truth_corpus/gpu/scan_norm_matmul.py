"""GPU truth corpus: a blockwise scan, a layer norm with rsqrtf and a split-K matmul with atomicAdd (CUDA C, NVRTC
through CuPy, -ftz=true by CuPy's default).

- cumsum / good_cumsum_block: tiles of 256, Hillis-Steele in double-buffered shared memory, carry across tiles.
- layernorm / good_ln_rsqrtf: two passes (mean, centred variance), rsqrtf(var + eps).
- layernorm / bad_ln_rsqrtf_stride: the same kernel told to assume a contiguous x (row stride N).
- matmul / good_matmul_splitk_atomic: 4 K-slices atomicAdd'ed into a zeroed float32 C; the order the slices land in
  changes from run to run, every order is a correct float32 sum.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import opgate


def _glue():
    name = "opgate_truth_corpus_cuda_glue"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / "_cuda_glue.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


cumsum = opgate.Operator(
    "cumsum",
    reference=lambda x: torch.cumsum(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [64, 7], "N": [1024, 1000]},
    dtypes=["float32"],
)

EPS = 1e-5

layernorm = opgate.Operator(
    "layernorm",
    reference=lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "N")),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5),
        opgate.TensorSpec("b", ("N",)),
        opgate.Scalar("eps", EPS),
    ],
    dims={"M": [64, 7], "N": [1024, 1000]},
    dtypes=["float32"],
)

matmul = opgate.Operator(
    "matmul",
    reference=lambda a, b: a @ b,
    inputs=[opgate.TensorSpec("a", ("M", "K")), opgate.TensorSpec("b", ("K", "N"))],
    dims={"M": [64, 17], "K": [256, 100], "N": [64, 33]},
    dtypes=["float32"],
)

SPLIT_K = 4


@cumsum.implementation("good_cumsum_block", backend="torch")
def good_cumsum_block(x):
    g = _glue()
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M * N == 0:
        return y
    g.launch(g.nvrtc_module("corpus_f32"), "cumsum_block", (M,), (g.ROW_THREADS,),
             (g.view(x), g.view(y), g.i64(N), g.i64(x.stride(0)), g.i64(x.stride(1))))
    return y


def _ln(x, w, b, eps, assume_contiguous: bool):
    g = _glue()
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M * N == 0:
        return y
    g.launch(g.nvrtc_module("corpus_f32"), "layernorm_rsqrtf", (M,), (g.ROW_THREADS,),
             (g.view(x), g.view(w), g.view(b), g.view(y), g.i64(N), g.i64(x.stride(0)), g.i64(x.stride(1)),
              g.i64(w.stride(0)), g.i64(b.stride(0)), g.f32(eps), g.i32(int(assume_contiguous))))
    return y


@layernorm.implementation("good_ln_rsqrtf", backend="torch")
def good_ln_rsqrtf(x, w, b, eps):
    return _ln(x, w, b, eps, assume_contiguous=False)


@layernorm.implementation("bad_ln_rsqrtf_stride", backend="torch")
def bad_ln_rsqrtf_stride(x, w, b, eps):
    return _ln(x, w, b, eps, assume_contiguous=True)


@matmul.implementation("good_matmul_splitk_atomic", backend="torch")
def good_matmul_splitk_atomic(a, b):
    g = _glue()
    M, K = a.shape
    N = b.shape[1]
    c = torch.zeros((M, N), dtype=torch.float32, device=a.device)
    if M * N * K == 0:
        return c
    k_chunk = (K + SPLIT_K - 1) // SPLIT_K
    grid = ((N + 15) // 16, (M + 15) // 16, (K + k_chunk - 1) // k_chunk)
    g.launch(g.nvrtc_module("corpus_f32"), "matmul_splitk_atomic", grid, (16, 16, 1),
             (g.view(a), g.view(b), g.view(c), g.i64(M), g.i64(N), g.i64(K), g.i64(a.stride(0)), g.i64(a.stride(1)),
              g.i64(b.stride(0)), g.i64(b.stride(1)), g.i64(k_chunk)))
    return c
