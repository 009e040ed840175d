"""The same kernels from two toolchains, on the same inputs: kernels.cu built by nvcc (kernels_nvcc.fatbin) and by
clang (kernels_clang.fatbin), each the `.nv_fatbin` section of the object `opgate inspect --compare` reads
(tests/data/toolchain/build.sh). Each implementation loads its build with CuPy's RawModule and launches the kernel
on PyTorch's current stream; a CUDA GPU and CuPy are needed (on a CPU machine the implementations raise).

    opgate verify tests/data/toolchain/two_builds_spec.py --budget quick --stages numerics --no-extras
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

import opgate

HERE = Path(__file__).resolve().parent
BUILDS = {"nvcc": HERE / "kernels_nvcc.fatbin", "clang": HERE / "kernels_clang.fatbin"}
# Mangled names: the same in both builds (Itanium ABI), as `opgate inspect --kernels` lists them.
ROW_SUM_256 = "_Z7row_sumILi256EEvPKfPfi"
TRANSPOSE_FLOAT = "_Z9transposeIfEvPKT_PS0_ii"


@functools.lru_cache(maxsize=None)
def _function(build: str, name: str):
    import cupy

    return cupy.RawModule(path=str(BUILDS[build])).get_function(name)


def _launch(build: str, name: str, grid: tuple[int, ...], block: tuple[int, ...], args: tuple) -> None:
    import cupy

    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    with stream:
        _function(build, name)(grid, block, args)


def _device_array(t: torch.Tensor):
    import cupy

    if not t.is_cuda:
        raise RuntimeError(f"the {t.device} tensor cannot reach a CUDA kernel: this implementation needs a CUDA GPU")
    return cupy.asarray(t)


row_sum = opgate.Operator(
    "row_sum",
    reference=lambda x: x.sum(dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), contiguous=True)],
    dims={"M": [64, 3], "N": [1024, 1000, 4097]},
    dtypes=["float32"],
    flops=lambda M, N: M * N,
    bytes=lambda M, N, itemsize: M * N * itemsize + M * itemsize,
)

transpose = opgate.Operator(
    "transpose",
    reference=lambda x: x.t().contiguous(),
    inputs=[opgate.TensorSpec("x", ("M", "N"), contiguous=True)],
    dims={"M": [64, 33], "N": [1024, 1000, 97]},
    dtypes=["float32"],
    flops=lambda M, N: 0,
    bytes=lambda M, N, itemsize: 2 * M * N * itemsize,
)


def _row_sum(build: str, x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    M, N = x.shape
    out = torch.empty(M, dtype=x.dtype, device=x.device)
    _launch(build, ROW_SUM_256, (M,), (256,), (_device_array(x), _device_array(out), _int32(N)))
    return out


def _transpose(build: str, x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    M, N = x.shape
    out = torch.empty((N, M), dtype=x.dtype, device=x.device)
    grid = ((N + 31) // 32, (M + 31) // 32)
    _launch(build, TRANSPOSE_FLOAT, grid, (32, 8), (_device_array(x), _device_array(out), _int32(M), _int32(N)))
    return out


def _int32(value: int):
    import numpy

    return numpy.int32(value)


for _build in BUILDS:
    row_sum.implementation(_build, backend="torch")(functools.partial(_row_sum, _build))
    transpose.implementation(_build, backend="torch")(functools.partial(_transpose, _build))
