"""Library corpus: fla-core 0.6.0 Triton activations (fla.modules.activations), forward and gradients.

- fla_swish: swish(x) = x * sigmoid(x) (SiLU); gradient for x.
- fla_swiglu: swiglu(x, y) = swish(x) * y (the SwiGLU of GatedMLP); gradients for x and y.
- fla_logsigmoid: logsigmoid(x, temperature) = log(sigmoid(x)) / temperature (gate activations of GLA/HGRN);
  gradient for x.
"""

from __future__ import annotations

import torch.nn.functional as F

import opgate

from fla.modules.activations import logsigmoid, swiglu, swish

DTYPES = ["float32", "float16", "bfloat16"]
DIMS = {"M": [16, 3], "N": [4096, 1000]}
PERF = {"M": 16384, "N": 11008}

fla_swish = opgate.Operator(
    "fla_swish",
    reference=lambda x: F.silu(x),
    inputs=[opgate.TensorSpec("x", ("M", "N"), requires_grad=True)],
    dims=DIMS,
    dtypes=DTYPES,
    perf_dims=PERF,
)


@fla_swish.implementation("fla_swish", backend="triton")
def _fla_swish(x):
    return swish(x)


fla_swiglu = opgate.Operator(
    "fla_swiglu",
    reference=lambda x, y: F.silu(x) * y,
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("y", ("M", "N"), requires_grad=True),
    ],
    dims=DIMS,
    dtypes=DTYPES,
    perf_dims=PERF,
)


@fla_swiglu.implementation("fla_swiglu", backend="triton")
def _fla_swiglu(x, y):
    return swiglu(x, y)


fla_logsigmoid = opgate.Operator(
    "fla_logsigmoid",
    reference=lambda x, temperature: F.logsigmoid(x) / temperature,
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.Scalar("temperature", 1.0),
    ],
    dims=DIMS,
    dtypes=DTYPES,
    perf_dims=PERF,
)


@fla_logsigmoid.implementation("fla_logsigmoid", backend="triton")
def _fla_logsigmoid(x, temperature):
    return logsigmoid(x, temperature)
