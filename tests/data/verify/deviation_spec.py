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


# Never written vs computed NaN (opgate fills torch.empty with NaN, then, when NaN comes out, with a second poison).
@double.implementation("tail_unwritten", backend="torch")
def double_tail_unwritten(x):
    y = torch.empty_like(x)
    y[:-1] = 2 * x[:-1]  # the last element is never written
    return y


@double.implementation("tail_nan", backend="torch")
def double_tail_nan(x):
    y = 2 * x
    y[-1] = math.nan  # computed NaN: a nonfinite bug, not an unwritten element
    return y


# The masked regime: logits with runs of -inf (padding and attention masks), fully masked rows where defined.
softmax_masked = opgate.Operator("softmax_masked", reference=lambda x: torch.softmax(x, -1),
                                 inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")],
                                 dims={"M": [4], "N": [64]}, dtypes=["float32"])
softmax_masked.implementation("torch", backend="torch")(lambda x: torch.softmax(x.float(), -1).to(x.dtype))

LANES = 256


@softmax_masked.implementation("lanewise_unguarded", backend="torch")
def softmax_lanewise_unguarded(x):
    """One block up to 256 columns; above, lane-wise online max/sum over 256-wide tiles without the -inf guard: a
    lane whose first value is -inf computes exp(-inf - (-inf)) = NaN (the multi-tile path of the truth corpus)."""
    if x.shape[-1] <= LANES:
        return torch.softmax(x.float(), -1).to(x.dtype)
    xf = x.float()
    rows = xf.reshape(-1, xf.shape[-1])
    m_lane = torch.full((rows.shape[0], LANES), -math.inf)
    s_lane = torch.zeros((rows.shape[0], LANES))
    for start in range(0, rows.shape[1], LANES):
        tile = torch.full((rows.shape[0], LANES), -math.inf)
        chunk = rows[:, start:start + LANES]
        tile[:, :chunk.shape[1]] = chunk
        m_new = torch.maximum(m_lane, tile)
        s_lane = s_lane * torch.exp(m_lane - m_new) + torch.exp(tile - m_new)
        m_lane = m_new
    m = m_lane.amax(-1, keepdim=True)
    s = (s_lane * torch.exp(m_lane - m)).sum(-1, keepdim=True)
    return (torch.exp(rows - m) / s).reshape(x.shape).to(x.dtype)


logsumexp = opgate.Operator("logsumexp", reference=lambda x: torch.logsumexp(x, -1),
                            inputs=[opgate.TensorSpec("x", ("M", "N"), kind="logits")],
                            dims={"M": [4], "N": [64]}, dtypes=["float32"])
logsumexp.implementation("torch", backend="torch")(lambda x: torch.logsumexp(x.float(), -1).to(x.dtype))


@logsumexp.implementation("unguarded", backend="torch")
def logsumexp_unguarded(x):
    # max-subtracted without the -inf guard: a fully masked row gives -inf + log(sum(exp(NaN))) = NaN, not -inf
    m = x.float().amax(-1, keepdim=True)
    return (m + torch.log(torch.exp(x.float() - m).sum(-1, keepdim=True))).squeeze(-1).to(x.dtype)


# A layout the implementation refuses with an explicit error (FlagGems' rotary embedding: "cos must be contiguous at
# the last dimension") is a `layout_limit`; an accidental error on the same layouts (FlagGems' cross-entropy backward:
# "not enough values to unpack") or a wrong answer stays a failure.
row_scale = opgate.Operator("row_scale", reference=lambda x: x * 3, inputs=[opgate.TensorSpec("x", ("M", "N"))],
                            dims={"M": [4], "N": [32]}, dtypes=["float32"])


@row_scale.implementation("refuses_views", backend="torch")
def _refuses_views(x):
    assert x.stride(-1) == 1 and x.is_contiguous(), "x must be contiguous"
    return x * 3


@row_scale.implementation("breaks_on_views", backend="torch")
def _breaks_on_views(x):
    saved = (x, x, x) if x.is_contiguous() else ()
    a, b, c = saved
    return a + b + c


@row_scale.implementation("views_a_view", backend="torch")
def _views_a_view(x):
    return x.view(-1).view(x.shape) * 3  # "view size is not compatible with input tensor's size and stride"


@row_scale.implementation("reads_storage_order", backend="torch")
def _reads_storage_order(x):
    return torch.as_strided(x, x.shape, (x.shape[-1], 1)) * 3  # the view's strides ignored
