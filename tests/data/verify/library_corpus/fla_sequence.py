"""Library corpus: fla-core 0.6.0 sequence helpers, forward and gradients.

- fla_rotary: fla.modules.rotary.rotary_embedding(x, cos, sin) on x [B, T, H, D] with cos/sin caches [T, D/2]
  (GPT-NeoX "rotate half" layout, interleaved=False); gradient for x. D is a head dim (exact: 64, 128).
- fla_short_conv: fla.modules.convolution.causal_conv1d(x, weight, bias, activation="swish"), the depthwise causal
  convolution behind fla.modules.ShortConvolution (kernel width 4): y[t] = silu(b + sum_k w[k] x[t - 3 + k]);
  gradients for x, weight and bias.
- fla_token_shift: fla.modules.token_shift.token_shift(x): x[t-1] - x[t] along T (x[-1] = 0), RWKV's token
  shift; gradient for x.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import opgate

from fla.modules.convolution import causal_conv1d
from fla.modules.rotary import rotary_embedding
from fla.modules.token_shift import token_shift

DTYPES = ["float32", "float16", "bfloat16"]


# ---------------------------------------------------------------- rotary embedding
def _rotary_ref(x, cos, sin):
    c = torch.cat([cos, cos], dim=-1)[None, :, None, :]  # [1, T, 1, D]
    s = torch.cat([sin, sin], dim=-1)[None, :, None, :]
    x1, x2 = x.chunk(2, dim=-1)
    return x * c + torch.cat([-x2, x1], dim=-1) * s


fla_rotary = opgate.Operator(
    "fla_rotary",
    reference=_rotary_ref,
    inputs=[
        opgate.TensorSpec("x", ("B", "T", "H", "D"), requires_grad=True),
        opgate.TensorSpec("cos", ("T", "R"), kind="uniform", low=-1.0, high=1.0),
        opgate.TensorSpec("sin", ("T", "R"), kind="uniform", low=-1.0, high=1.0),
    ],
    dims={"B": [2, 1], "T": [64, 19], "H": [4, 2], "D": [64, 128]},
    derived_dims={"R": lambda D: D // 2},
    exact_dims=["D"],
    dtypes=DTYPES,
    perf_dims={"B": 8, "T": 4096, "H": 32, "D": 128},
)


@fla_rotary.implementation("fla_rotary", backend="triton")
def _fla_rotary(x, cos, sin):
    return rotary_embedding(x, cos, sin, interleaved=False)


# ---------------------------------------------------------------- short causal convolution
def _short_conv_ref(x, w, b):
    T, width = x.shape[1], w.shape[1]
    y = F.conv1d(x.transpose(1, 2), w.unsqueeze(1), b, padding=width - 1, groups=x.shape[2])[..., :T]
    return F.silu(y.transpose(1, 2))


fla_short_conv = opgate.Operator(
    "fla_short_conv",
    reference=_short_conv_ref,
    inputs=[
        opgate.TensorSpec("x", ("B", "T", "D"), requires_grad=True),
        opgate.TensorSpec("w", ("D", "W"), kind="uniform", low=-0.5, high=0.5, requires_grad=True),
        opgate.TensorSpec("b", ("D",), kind="uniform", low=-0.5, high=0.5, requires_grad=True),
    ],
    dims={"B": [2, 1], "T": [64, 23], "D": [256, 96], "W": [4]},
    exact_dims=["W"],
    dtypes=DTYPES,
    perf_dims={"B": 8, "T": 4096, "D": 4096},
)


@fla_short_conv.implementation("fla_short_conv", backend="triton")
def _fla_short_conv(x, w, b):
    y, _final_state = causal_conv1d(x, weight=w, bias=b, activation="swish")
    return y


# ---------------------------------------------------------------- token shift
fla_token_shift = opgate.Operator(
    "fla_token_shift",
    reference=lambda x: F.pad(x, (0, 0, 1, 0))[:, :-1] - x,
    inputs=[opgate.TensorSpec("x", ("B", "T", "D"), requires_grad=True)],
    dims={"B": [2, 1], "T": [64, 17], "D": [256, 100]},
    dtypes=DTYPES,
    perf_dims={"B": 8, "T": 4096, "D": 4096},
)


@fla_token_shift.implementation("fla_token_shift", backend="triton")
def _fla_token_shift(x):
    return token_shift(x)
