"""GPU truth corpus: y = 2 * x on an (M, N) float32 view, CUDA C through CuPy and nvcc cubins, on torch tensors.

Correct (the spec leaves subnormals="any", so flushing them is a documented deviation, not a failure)
- good_scale2_nvrtc: NVRTC through CuPy, CuPy's default options (-ftz=true): subnormal x gives 0.
- good_scale2_nvrtc_fastmath: NVRTC with --use_fast_math (also flushes).
- good_scale2_nvcc_plain: nvcc cubin without flags: IEEE subnormals, bit-exact.
- good_scale2_nvcc_ftz: nvcc -ftz=true cubin.
- good_scale2_nvcc_fastmath: nvcc --use_fast_math cubin.

Buggy
- bad_scale2_tail_grid: the launcher rounds the grid down (M*N // 256 blocks), so the last partial block of
  elements is never written.
- bad_scale2_stride: the kernel indexes x as contiguous (x[i]): wrong on transposed or sliced views.
- bad_scale2_side_stream: right values, but launched on a private CuPy stream that the caller's stream never waits
  for: the result may be read before it is written (stream: "runs on a stream other than the caller's current stream").
- bad_scale2_legacy_stream: right values, launched on CuPy's default stream, the legacy default stream. Right while
  the caller's stream is PyTorch's default (the same legacy stream); under a caller's non-blocking stream the kernel
  neither waits for its inputs nor is waited for (stream). The common interop mistake: no ExternalStream.
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

THREADS = 256
_SIDE_STREAM = []


def _run(x: torch.Tensor, module, kernel: str = "scale2", round_grid_down: bool = False,
         side_stream: bool = False, legacy_stream: bool = False) -> torch.Tensor:
    g = _glue()
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    n = M * N
    if n == 0:
        return y
    blocks = n // THREADS if round_grid_down else (n + THREADS - 1) // THREADS
    if blocks == 0:
        return y
    args = (g.view(x), g.view(y), g.i64(M), g.i64(N), g.i64(x.stride(0)), g.i64(x.stride(1)))
    if side_stream:
        import cupy

        if not _SIDE_STREAM:
            _SIDE_STREAM.append(cupy.cuda.Stream(non_blocking=True))
        with _SIDE_STREAM[0]:
            g.launch(module, kernel, (blocks,), (THREADS,), args, on_torch_stream=False)
    elif legacy_stream:
        import cupy

        with cupy.cuda.Stream.null:  # CuPy's default without CUPY_CUDA_PER_THREAD_DEFAULT_STREAM: the legacy stream
            g.launch(module, kernel, (blocks,), (THREADS,), args, on_torch_stream=False)
    else:
        g.launch(module, kernel, (blocks,), (THREADS,), args)
    return y


@scale2.implementation("good_scale2_nvrtc", backend="torch")
def good_scale2_nvrtc(x):
    return _run(x, _glue().nvrtc_module("corpus_f32"))


@scale2.implementation("good_scale2_nvrtc_fastmath", backend="torch")
def good_scale2_nvrtc_fastmath(x):
    return _run(x, _glue().nvrtc_module("corpus_f32", ("--use_fast_math",)))


@scale2.implementation("good_scale2_nvcc_plain", backend="torch")
def good_scale2_nvcc_plain(x):
    return _run(x, _glue().cubin_module("corpus_f32", "plain"))


@scale2.implementation("good_scale2_nvcc_ftz", backend="torch")
def good_scale2_nvcc_ftz(x):
    return _run(x, _glue().cubin_module("corpus_f32", "ftz"))


@scale2.implementation("good_scale2_nvcc_fastmath", backend="torch")
def good_scale2_nvcc_fastmath(x):
    return _run(x, _glue().cubin_module("corpus_f32", "fastmath"))


@scale2.implementation("bad_scale2_tail_grid", backend="torch")
def bad_scale2_tail_grid(x):
    return _run(x, _glue().nvrtc_module("corpus_f32"), round_grid_down=True)


@scale2.implementation("bad_scale2_stride", backend="torch")
def bad_scale2_stride(x):
    return _run(x, _glue().nvrtc_module("corpus_f32"), kernel="scale2_contiguous_only")


@scale2.implementation("bad_scale2_side_stream", backend="torch")
def bad_scale2_side_stream(x):
    return _run(x, _glue().nvrtc_module("corpus_f32"), side_stream=True)


@scale2.implementation("bad_scale2_legacy_stream", backend="torch")
def bad_scale2_legacy_stream(x):
    return _run(x, _glue().nvrtc_module("corpus_f32"), legacy_stream=True)
