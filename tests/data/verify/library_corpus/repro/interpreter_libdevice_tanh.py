"""Repro: Triton 3.9's CPU interpreter has no libdevice.tanh, so fla's soft-capped cross-entropy cannot run on a CPU.

    TRITON_INTERPRET=1 python repro/interpreter_libdevice_tanh.py

fla/modules/fused_cross_entropy/ops.py imports `from triton.language.extra.libdevice import tanh` and computes
`logit_softcapping * tanh(logits / logit_softcapping)`. A four-line kernel doing the same shows the interpreter's
tanh returns None (TypeError: unsupported operand type(s) for *: 'float' and 'NoneType'), independent of fla; the
same fla call without soft-capping runs. opgate verify reports this as FAIL [crash] (and as a size_limit for one
added size) instead of an interpreter limitation; only a GPU run can judge the kernel.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.libdevice import tanh  # noqa: E402


@triton.jit
def _softcap(x_ptr, y_ptr, n, cap, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(y_ptr + offs, cap * tanh(x / cap), mask=offs < n)


x = torch.linspace(-100, 100, 8)
y = torch.empty_like(x)
try:
    _softcap[(1,)](x, y, 8, 30.0, BLOCK=8)
    print("libdevice.tanh ran:", y.tolist())
except Exception as exc:  # noqa: BLE001
    print("plain Triton kernel with libdevice.tanh:", type(exc).__name__, exc)

from fla.modules.fused_cross_entropy import cross_entropy_loss  # noqa: E402

logits = torch.randn(3, 50) * 10
labels = torch.tensor([1, 7, 42])
print("fla CE without soft-cap:", cross_entropy_loss(logits, labels)[0].tolist())
try:
    cross_entropy_loss(logits, labels, logit_softcapping=30.0)
except Exception as exc:  # noqa: BLE001
    print("fla CE with logit_softcapping=30:", type(exc).__name__, exc)
