"""Library corpus: fla-core 0.6.0 kernel helpers of fla.ops.utils (forward only: plain functions, no autograd).

- fla_logsumexp: logsumexp_fwd(x): logsumexp over the last dim, fp32 output.
- fla_softmax: softmax_fwd(x): softmax over the last dim, fp32 output (dtype=torch.float, the default).
- fla_softmax_bwd: softmax_bwd(p, dp): the softmax vector-Jacobian product p * (dp - sum(p * dp)), fp32 output;
  p is a probability row (kind="probability").
- fla_global_cumsum: chunk_global_cumsum(s) on s [B, T, H]: inclusive prefix sum along T, fp32 output.
- fla_local_cumsum: chunk_local_cumsum(g, chunk_size=64) on g [B, T, H]: the prefix sum restarting at every
  chunk of 64 time steps (the decay cumsum of the chunked linear-attention kernels), fp32 output.
- fla_matmul: matmul(a, b): a @ b with the library's Triton GEMM (fp32 accumulation, no TF32 for fp32 inputs).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import opgate

from fla.ops.utils import chunk_global_cumsum, chunk_local_cumsum, logsumexp_fwd, matmul
from fla.ops.utils import softmax_bwd, softmax_fwd

DTYPES = ["float32", "float16", "bfloat16"]

fla_logsumexp = opgate.Operator(
    "fla_logsumexp",
    reference=lambda x: torch.logsumexp(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")],
    dims={"M": [16, 3], "N": [4096, 1000]},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "N": 4096},
)


@fla_logsumexp.implementation("fla_logsumexp", backend="triton")
def _fla_logsumexp(x):
    return logsumexp_fwd(x)


fla_softmax = opgate.Operator(
    "fla_softmax",
    reference=lambda x: torch.softmax(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")],
    dims={"M": [16, 3], "N": [1024, 4096, 1000]},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "N": 4096},
)


@fla_softmax.implementation("fla_softmax", backend="triton")
def _fla_softmax(x):
    return softmax_fwd(x)


fla_softmax_bwd = opgate.Operator(
    "fla_softmax_bwd",
    reference=lambda p, dp: p * (dp - (p * dp).sum(dim=-1, keepdim=True)),
    inputs=[
        opgate.TensorSpec("p", ("M", "N"), kind="probability"),
        opgate.TensorSpec("dp", ("M", "N")),
    ],
    dims={"M": [16, 3], "N": [1024, 1000]},
    dtypes=DTYPES,
    perf_dims={"M": 16384, "N": 4096},
)


@fla_softmax_bwd.implementation("fla_softmax_bwd", backend="triton")
def _fla_softmax_bwd(p, dp):
    return softmax_bwd(p, dp)


fla_global_cumsum = opgate.Operator(
    "fla_global_cumsum",
    reference=lambda s: torch.cumsum(s, dim=1),
    inputs=[opgate.TensorSpec("s", ("B", "T", "H"))],
    dims={"B": [2, 1], "T": [256, 1000], "H": [4, 3]},
    dtypes=DTYPES,
    perf_dims={"B": 8, "T": 8192, "H": 32},
)


@fla_global_cumsum.implementation("fla_global_cumsum", backend="triton")
def _fla_global_cumsum(s):
    return chunk_global_cumsum(s)


CHUNK = 64


def _local_cumsum_ref(g):
    B, T, H = g.shape
    pad = (-T) % CHUNK
    chunks = F.pad(g, (0, 0, 0, pad)).reshape(B, (T + pad) // CHUNK, CHUNK, H)
    return chunks.cumsum(dim=2).reshape(B, T + pad, H)[:, :T]


fla_local_cumsum = opgate.Operator(
    "fla_local_cumsum",
    reference=_local_cumsum_ref,
    inputs=[opgate.TensorSpec("g", ("B", "T", "H"))],
    dims={"B": [2, 1], "T": [256, 1000], "H": [4, 3]},
    dtypes=DTYPES,
    perf_dims={"B": 8, "T": 8192, "H": 32},
)


@fla_local_cumsum.implementation("fla_local_cumsum", backend="triton")
def _fla_local_cumsum(g):
    return chunk_local_cumsum(g, chunk_size=CHUNK)


fla_matmul = opgate.Operator(
    "fla_matmul",
    reference=lambda a, b: a @ b,
    inputs=[
        opgate.TensorSpec("a", ("M", "K")),
        opgate.TensorSpec("b", ("K", "N")),
    ],
    dims={"M": [128, 33], "K": [256, 100], "N": [128, 65]},
    dtypes=DTYPES,
    perf_dims={"M": 8192, "K": 4096, "N": 4096},
)


@fla_matmul.implementation("fla_matmul", backend="triton")
def _fla_matmul(a, b):
    return matmul(a, b)
