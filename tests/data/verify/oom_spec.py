"""Implementations that run out of GPU memory in a numerics case, for opgate's "could not judge" rule (CPU too:
torch.cuda.OutOfMemoryError is a Python exception class, raised here on any device).

  torch              right everywhere
  oom_on_one_case    raises out of memory on every case with a size of 63 (one case of the quick plan), right
                     elsewhere: without a device memory reading (the CPU) opgate cannot show the demand was the
                     implementation's own, so the case is not judged and the result is an error, never a FAIL
  oom_once           raises out of memory on its first call in the process, then is right: the retry after freeing
                     the cache is judged and passes
  oom_and_wrong      like oom_on_one_case, and 3x instead of 2x elsewhere: a FAIL for the cases it got wrong, with
                     the case it could not judge named beside them
"""

import torch

import opgate

OOM_SIZE = 63  # an edge size opgate adds (2^k - 1 below the declared 64): one case of the quick plan
MESSAGE = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB of which "
           "118.00 MiB is free.")

double = opgate.Operator(
    "double",
    reference=lambda x: x * 2,
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [4, 8], "N": [64]},
    dtypes=["float32"],
)


@double.implementation("torch")
def double_torch(x):
    return x + x


@double.implementation("oom_on_one_case", backend="torch")
def double_oom_on_one_case(x):
    if OOM_SIZE in tuple(x.shape):
        raise torch.cuda.OutOfMemoryError(MESSAGE)
    return x + x


_CALLS = []


@double.implementation("oom_once", backend="torch")
def double_oom_once(x):
    _CALLS.append(1)
    if len(_CALLS) == 1:
        raise torch.cuda.OutOfMemoryError(MESSAGE)
    return x + x


@double.implementation("oom_and_wrong", backend="torch")
def double_oom_and_wrong(x):
    if OOM_SIZE in tuple(x.shape):
        raise torch.cuda.OutOfMemoryError(MESSAGE)
    return x * 3
