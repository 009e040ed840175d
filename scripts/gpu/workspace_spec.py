"""GPU validation spec for "out of memory caused by another process is could-not-judge": y = 2x through an 8 GiB
scratch workspace allocated on every call (as a kernel with a large workspace does). Alone on an H200 it passes; with
scripts/gpu/fill_gpu.py holding all but a few GiB, its numerics must be an `error` ("could not judge ... another
process holds N GiB"), never a FAIL (scripts/gpu/failure_classes.sh)."""

from __future__ import annotations

import torch

import opgate

WORKSPACE_BYTES = 8 << 30

scale2 = opgate.Operator("scale2", reference=lambda x: 2 * x, inputs=[opgate.TensorSpec("x", ("M", "N"))],
                         dims={"M": [64, 7], "N": [1024, 1000]}, dtypes=["float32"])


@scale2.implementation("workspace_8gib", backend="torch")
def workspace_8gib(x):
    workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=x.device)
    del workspace
    return x * 2
