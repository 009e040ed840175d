"""GPU validation spec for the `stream` class and the runtime stage's measured graph-mismatch causes (CuPy kernels on
PyTorch tensors; scripts/gpu/failure_classes.sh runs it with --stages numerics,runtime and checks the verdicts).

scale2 (y = 2x)
  good_cupy_torch_stream   launched on PyTorch's current stream (cupy.cuda.ExternalStream): passes (or warns ftz)
  bad_cupy_legacy_stream   launched on CuPy's default stream, the legacy default stream: numerics fails [stream]
                           (the gaming probe's busy non-blocking caller stream), runtime fails [stream] "its work runs
                           outside the capturing stream"
rowsum (x.sum(-1))
  bad_rowsum_racy          every thread adds into out[row] without atomics (a read-modify-write race: lost updates):
                           numerics fails, runtime names it "nondeterministic (a race or unordered atomics)"
  good_rowsum_atomic       atomicAdd on float: right, nondeterministic only in rounding order (for information)
"""

from __future__ import annotations

import torch

import opgate

SOURCE = r"""
extern "C" __global__ void scale2(const float* x, float* y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
extern "C" __global__ void rowsum_racy(const float* x, float* out, long long rows, long long cols) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < rows * cols) out[i / cols] = out[i / cols] + x[i];
}
extern "C" __global__ void rowsum_atomic(const float* x, float* out, long long rows, long long cols) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < rows * cols) atomicAdd(&out[i / cols], x[i]);
}
"""
_MODULE: list = []


def _kernel(name: str):
    import cupy

    if not _MODULE:
        _MODULE.append(cupy.RawModule(code=SOURCE))
    return _MODULE[0].get_function(name)


def _args(*values):
    import cupy
    import numpy

    return tuple(cupy.asarray(v) if isinstance(v, torch.Tensor) else numpy.int64(v) for v in values)


def _blocks(n: int) -> tuple[int]:
    return ((n + 255) // 256,)


scale2 = opgate.Operator("scale2", reference=lambda x: 2 * x, inputs=[opgate.TensorSpec("x", ("M", "N"))],
                         dims={"M": [64, 7], "N": [1024, 1000]}, dtypes=["float32"])


def _scale2(x: torch.Tensor, legacy: bool) -> torch.Tensor:
    import cupy

    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel():
        stream = cupy.cuda.Stream.null if legacy else cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        with stream:
            _kernel("scale2")(_blocks(x.numel()), (256,), _args(x, y, x.numel()))
    return y


@scale2.implementation("good_cupy_torch_stream", backend="torch")
def good_cupy_torch_stream(x):
    return _scale2(x, legacy=False)


@scale2.implementation("bad_cupy_legacy_stream", backend="torch")
def bad_cupy_legacy_stream(x):
    return _scale2(x, legacy=True)


rowsum = opgate.Operator("rowsum", reference=lambda x: x.sum(-1), inputs=[opgate.TensorSpec("x", ("M", "N"))],
                         dims={"M": [64, 7], "N": [4096, 1000]}, dtypes=["float32"])


def _rowsum(x: torch.Tensor, kernel: str) -> torch.Tensor:
    import cupy

    x = x.contiguous()
    out = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    if x.numel():
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            _kernel(kernel)(_blocks(x.numel()), (256,), _args(x, out, x.shape[0], x.shape[1]))
    return out


@rowsum.implementation("bad_rowsum_racy", backend="torch")
def bad_rowsum_racy(x):
    return _rowsum(x, "rowsum_racy")


@rowsum.implementation("good_rowsum_atomic", backend="torch")
def good_rowsum_atomic(x):
    return _rowsum(x, "rowsum_atomic")
