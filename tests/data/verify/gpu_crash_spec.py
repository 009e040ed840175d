"""On a GPU: a CUDA C kernel (CuPy RawModule on PyTorch tensors) that writes to a wild address on the one
case of the quick plan with a size of 63. That is a sticky CUDA error (700, illegal address): the context is
lost for the rest of the process. opgate must fail this implementation on that case (failure class `crash`,
"left the CUDA context unusable") and judge the other cases in a fresh process; the twin passes.
"""

import functools

import torch

import opgate

CRASH_SIZE = 63

SOURCE = r"""
extern "C" __global__ void double_or_wild(const float* x, float* y, int n, long long wild) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i + (i == 0 ? wild : 0)] = 2.0f * x[i];  // wild != 0: element 0 goes to a bad address
}
"""

double = opgate.Operator(
    "double",
    reference=lambda x: x * 2,
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [4, 8], "N": [64]},
    dtypes=["float32"],
)


@functools.lru_cache(maxsize=None)
def _kernel():
    import cupy

    return cupy.RawModule(code=SOURCE).get_function("double_or_wild")


def _run(x, wild):
    import cupy
    import numpy as np

    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel() == 0:  # opgate's empty cases: nothing to launch
        return y
    with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        _kernel()(((x.numel() + 255) // 256,), (256,),
                  (np.uint64(x.data_ptr()), np.uint64(y.data_ptr()), np.int32(x.numel()), np.int64(wild)))
    return y


@double.implementation("sticky_error", backend="torch")
def double_sticky_error(x):
    return _run(x, (1 << 40) if CRASH_SIZE in tuple(x.shape) else 0)


@double.implementation("sticky_error_twin", backend="torch")
def double_sticky_error_twin(x):
    return _run(x, 0)
