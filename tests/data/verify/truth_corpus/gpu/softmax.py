"""GPU truth corpus: row softmax in CUDA C with the fast-math exponential __expf.

- good_softmax_expf_fastmath: NVRTC --use_fast_math (CuPy), max-subtracted, fmaxf max, __expf, 1/sum; about 2 ulp.
- good_softmax_expf_nvcc_fastmath: the same kernel from an nvcc --use_fast_math cubin.
- bad_softmax_expf_no_max: no max-subtraction: __expf(x) overflows to inf above ~88.7 (logits promise 1e4).
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


softmax = opgate.Operator(
    "softmax",
    reference=lambda x: torch.softmax(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")],
    dims={"M": [64, 7], "N": [1024, 1000]},
    dtypes=["float32"],
)


def _run(x: torch.Tensor, module, sub_max: bool = True) -> torch.Tensor:
    g = _glue()
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M * N == 0:
        return y
    g.launch(module, "softmax_expf", (M,), (g.ROW_THREADS,),
             (g.view(x), g.view(y), g.i64(N), g.i64(x.stride(0)), g.i64(x.stride(1)), g.i32(int(sub_max))))
    return y


@softmax.implementation("good_softmax_expf_fastmath", backend="torch")
def good_softmax_expf_fastmath(x):
    return _run(x, _glue().nvrtc_module("corpus_f32", ("--use_fast_math",)))


@softmax.implementation("good_softmax_expf_nvcc_fastmath", backend="torch")
def good_softmax_expf_nvcc_fastmath(x):
    return _run(x, _glue().cubin_module("corpus_f32", "fastmath"))


@softmax.implementation("bad_softmax_expf_no_max", backend="torch")
def bad_softmax_expf_no_max(x):
    return _run(x, _glue().nvrtc_module("corpus_f32", ("--use_fast_math",)), sub_max=False)
