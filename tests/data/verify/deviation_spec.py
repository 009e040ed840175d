"""Operators whose correct-but-different implementations must be documented deviations, not failures,
and whose real bugs must still fail with their class (tests/verify/test_verify_deviations.py)."""

import math

import torch

import opgate

FLUSH = 2.0**-126  # float32's smallest normal


def _flush(x):
    return torch.where(x.abs() < FLUSH, torch.zeros_like(x), x)


def _double_ftz(x):
    """What a -ftz=true kernel computes: subnormal inputs and results read and written as zero."""
    return _flush(_flush(x.float()) * 2).to(x.dtype)


double = opgate.Operator("double", reference=lambda x: 2 * x, inputs=[opgate.TensorSpec("x", ("N",))],
                         dims={"N": [257]}, dtypes=["float32"])
double.implementation("ftz", backend="torch")(_double_ftz)

double_exact = opgate.Operator("double_exact", reference=lambda x: 2 * x, inputs=[opgate.TensorSpec("x", ("N",))],
                               dims={"N": [257]}, dtypes=["float32"], subnormals="exact")
double_exact.implementation("ftz", backend="torch")(_double_ftz)


def _unit_rows(x):
    # the norm in double, so PyTorch eager in float32 does not overflow either (a GPU kernel would)
    norm = x.double().norm(dim=-1, keepdim=True)
    return (x.double() / norm * math.sqrt(x.shape[-1])).to(x.dtype)


unit_rows = opgate.Operator("unit_rows", reference=_unit_rows, inputs=[opgate.TensorSpec("x", ("M", "N"))],
                            dims={"M": [4], "N": [64]}, dtypes=["float32"], propagates_nonfinite=False)


@unit_rows.implementation("naive_sumsq", backend="torch")
def unit_rows_naive(x):
    # float32 sum of squares: overflows once |x| reaches ~1e19 (a range limit, far past any activation)
    sumsq = (x.float() * x.float()).sum(-1, keepdim=True)
    return (x / torch.sqrt(sumsq) * math.sqrt(x.shape[-1])).to(x.dtype)


softmax = opgate.Operator("softmax", reference=lambda x: torch.softmax(x, -1),
                          inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")],
                          dims={"M": [4], "N": [64]}, dtypes=["float32"], propagates_nonfinite=False)


@softmax.implementation("no_max", backend="torch")
def softmax_no_max(x):
    # no max-subtraction: exp overflows at logits of ~89, inside what logits promise (a bug)
    e = torch.exp(x)
    return e / e.sum(-1, keepdim=True)


def _quantize(x):
    return torch.clamp(torch.round(x / 0.05), -128, 127).to(torch.int8)


quantize = opgate.Operator("quantize", reference=_quantize, inputs=[opgate.TensorSpec("x", ("N",))],
                           dims={"N": [300]}, dtypes=["float32"], propagates_nonfinite=True)


@quantize.implementation("saturating", backend="torch")
def quantize_saturating(x):
    # NaN -> 127, +-inf saturate: one of many answers to a question C and PyTorch leave undefined
    y = torch.round(torch.nan_to_num(x, nan=1e9) / 0.05)
    return torch.clamp(y, -128, 127).to(torch.int8)


rowmax = opgate.Operator("rowmax", reference=lambda x: x.amax(-1), inputs=[opgate.TensorSpec("x", ("M", "N"))],
                         dims={"M": [8], "N": [33]}, dtypes=["float32"], nan_policy="ignore")


@rowmax.implementation("fmax", backend="torch")
def rowmax_fmax(x):
    # like CUDA's fmaxf: a NaN operand is dropped
    return torch.where(torch.isnan(x), torch.full_like(x, -math.inf), x).amax(-1)


rowmax_strict = opgate.Operator("rowmax_strict", reference=lambda x: x.amax(-1),
                                inputs=[opgate.TensorSpec("x", ("M", "N"))], dims={"M": [8], "N": [33]},
                                dtypes=["float32"])
rowmax_strict.implementation("fmax", backend="torch")(rowmax_fmax)


def _cumsum_blockwise(x):
    """float32 blockwise scan: 64-wide sequential blocks, a float32 carry between them (as a GPU scan does)."""
    x = x.float()
    out = torch.empty_like(x)
    carry = torch.zeros(x.shape[:-1], dtype=torch.float32)
    for start in range(0, x.shape[-1], 64):
        block = x[..., start:start + 64]
        acc = carry.clone()
        for j in range(block.shape[-1]):
            acc = acc + block[..., j]
            out[..., start + j] = acc
        carry = acc
    return out


cumsum = opgate.Operator("cumsum", reference=lambda x: torch.cumsum(x, -1), inputs=[opgate.TensorSpec("x", ("M", "N"))],
                         dims={"M": [2], "N": [1000]}, dtypes=["float32"], propagates_nonfinite=False)
cumsum.implementation("blockwise", backend="torch")(_cumsum_blockwise)
