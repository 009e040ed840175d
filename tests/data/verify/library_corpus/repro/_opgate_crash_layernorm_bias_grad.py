"""Repro (an opgate spec, torch only, no library): `opgate verify` exits 3 with an internal error on a layer norm
whose bias requires grad.

    PYTHONPATH=src python -m opgate verify tests/data/verify/library_corpus/repro/_opgate_crash_layernorm_bias_grad.py \
        --budget quick --no-extras --stages numerics --jobs 1

  -> ValueError: torch.cat(): expected a non-empty list of Tensors
     (opgate/verify/calibrate.py case_accumulation_bounds -> error_bounds.py accumulation_bounds, while calibrating
     the derived operator ln.grad; "opgate: internal error (a bug in opgate)", exit 3, no JSON report)

Measured on the CPU (opgate at libcorpus 9241932+): with requires_grad on (x, w, b), (x, b) or (w, b) it crashes at
N = 1, 2 or 64 (exact); with (x, w) only it passes, and x * w + b with (x, w, b) passes. The bias gradient of a
layer norm is sum_m g[m, :]: it depends on no input of the operator, only on the upstream gradient. The crash
takes the whole spec file down (every operator in it loses its verdict): fla_norms.py's five operators, because
fla_layer_norm and fla_group_norm differentiate their bias.
"""

import torch.nn.functional as F

import opgate

ln = opgate.Operator(
    "ln",
    reference=lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
    inputs=[
        opgate.TensorSpec("x", ("M", "N"), requires_grad=True),
        opgate.TensorSpec("w", ("N",), kind="uniform", low=0.5, high=1.5, requires_grad=True),
        opgate.TensorSpec("b", ("N",), requires_grad=True),
    ],
    dims={"M": [4], "N": [64]},
    exact_dims=["N"],
    dtypes=["float32"],
)


@ln.implementation("torch")
def ln_torch(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
