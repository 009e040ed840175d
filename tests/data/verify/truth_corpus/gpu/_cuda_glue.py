"""Launch the corpus' CUDA C kernels on PyTorch CUDA tensors through CuPy (imported lazily: this file loads on a
CPU-only machine, the kernels only run on a GPU).

Two ways a kernel gets built, as users build them:
- NVRTC through CuPy: `cupy.RawModule(code=..., options=...)`. CuPy adds `-ftz=true` to every NVRTC compile unless
  told otherwise (cupy issue 9576), so these kernels flush subnormals to zero; `--use_fast_math` adds approximate
  division, sqrt and exp on top.
- nvcc cubins: `nvcc -cubin -arch=sm_90 [-ftz=true | --use_fast_math]`, built by scripts/gpu/corpus.sh into
  $OPGATE_CORPUS_CUBIN_DIR (default: gpu/build/ beside this file) and loaded with `cupy.RawModule(path=...)`.

Tensors go to kernels as CuPy views of the same memory (`cupy.asarray`, through __cuda_array_interface__; a view
of a strided tensor starts at its first element) and every launch runs on PyTorch's current stream
(cupy.cuda.ExternalStream), as a production wrapper must; gpu/elementwise.py has one wrapper that does not.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
KERNEL_DIR = HERE / "kernels"
ROW_THREADS = 256  # matches ROW_THREADS in kernels/*.cu

_MODULES: dict[tuple[str, str, tuple[str, ...]], Any] = {}


def cubin_dir() -> Path:
    return Path(os.environ.get("OPGATE_CORPUS_CUBIN_DIR", HERE / "build"))


def nvrtc_module(source: str, options: Sequence[str] = ()) -> Any:
    """The CuPy RawModule of kernels/<source>.cu compiled by NVRTC with these extra options (CuPy's defaults kept)."""
    import cupy

    key = ("nvrtc", source, tuple(options))
    if key not in _MODULES:
        code = (KERNEL_DIR / f"{source}.cu").read_text()
        _MODULES[key] = cupy.RawModule(code=code, options=tuple(options))
    return _MODULES[key]


def cubin_module(source: str, variant: str) -> Any:
    """The RawModule of an nvcc-built cubin: variant is "plain", "ftz" or "fastmath" (see scripts/gpu/corpus.sh)."""
    import cupy

    key = ("cubin", source, (variant,))
    if key not in _MODULES:
        path = cubin_dir() / f"{source}_{variant}.cubin"
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: build it with scripts/gpu/corpus.sh (nvcc -cubin -arch=sm_90)")
        _MODULES[key] = cupy.RawModule(path=str(path))
    return _MODULES[key]


def view(t: Any) -> Any:
    """A CuPy array over the same memory as the torch tensor t (no copy)."""
    import cupy

    return cupy.asarray(t.detach())


def i64(v: int) -> Any:
    import numpy

    return numpy.int64(v)


def f32(v: float) -> Any:
    import numpy

    return numpy.float32(v)


def i32(v: int) -> Any:
    import numpy

    return numpy.int32(v)


def launch(module: Any, name: str, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any],
           on_torch_stream: bool = True) -> None:
    """Launch kernel `name` on PyTorch's current stream (or, on_torch_stream=False, on CuPy's current stream)."""
    import cupy
    import torch

    kernel = module.get_function(name)
    if on_torch_stream:
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            kernel(grid, block, tuple(args))
    else:
        kernel(grid, block, tuple(args))

