"""Workaround spec (not in the manifest): fla_layer_norm and fla_group_norm of ../fla_norms.py with the bias's
requires_grad dropped, so that opgate's internal error on a bias gradient (_opgate_crash_layernorm_bias_grad.py)
does not take the file down. Same library calls, references, sizes and dtypes; dx and dw still checked.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch.nn.functional as F

import opgate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _corpus_env import interpreter_autotune_first_config  # noqa: E402

interpreter_autotune_first_config()

from fla.modules.layernorm import group_norm, layer_norm  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16"]
GROUPS = 4

fla_layer_norm_nb = opgate.Operator(
    "fla_layer_norm_nb",
    reference=lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.TensorSpec("b", ("N",)),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"M": [16, 5], "N": [1024, 4096]},
    dtypes=DTYPES,
)


@fla_layer_norm_nb.implementation("fla_layer_norm", backend="triton")
def _fla_layer_norm(x, w, b, eps):
    return layer_norm(x, w, b, eps=eps)


fla_group_norm_nb = opgate.Operator(
    "fla_group_norm_nb",
    reference=lambda x, w, b, eps: F.group_norm(x, GROUPS, w, b, eps),
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.TensorSpec("b", ("N",)),
        opgate.Scalar("eps", 1e-5),
    ],
    dims={"M": [16, 5], "G": [256, 512]},
    derived_dims={"N": lambda G: GROUPS * G},
    dtypes=DTYPES,
)


@fla_group_norm_nb.implementation("fla_group_norm", backend="triton")
def _fla_group_norm(x, w, b, eps):
    return group_norm(x, w, b, eps=eps, num_groups=GROUPS)
