"""cut-cross-entropy 25.1.1: `linear_cross_entropy` with its documented options together, impl "cce":
softcap=20 (Gemma-2 style logit soft-capping), shift=True (next-token prediction without materialising the shifted
embeddings), reduction="none", ignore_index=0.

Documented meaning (doc.py): with shift=True,
    shift_e = e[..., :-1, :].flatten(0, -2); shift_targets = targets[..., 1:].flatten()
    loss = F.cross_entropy(shift_e @ c.T, shift_targets)
and softcap applies `softcap * tanh(logits / softcap)` to the logits (utils.softcapping). With reduction="none"
the library returns the per-token loss of shape (B, T - 1) (cce.py slices off the first position; its README's
perplexity example: "A (B, T - 1) tensor because reduction="none""), 0 where the target is ignored, as
F.cross_entropy(reduction="none") does.

ignore_index=0 (the library takes any int; -100 is only the default): targets are drawn from [0, V), so with the
declared V = 5 one token in five is ignored, exercising the "valids" path; V = 300 rarely ignores any.
Dtypes float16 and bfloat16 (the backward refuses float32 embeddings). `_cce_env.py`'s shim answers the
interpreter's libdevice tanh/log1p stubs on a CPU host.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the spec's folder: _cce_env.py
import _cce_env  # noqa: E402, F401  (interpreter libdevice shim; no-op on a GPU)
import opgate
from cut_cross_entropy import linear_cross_entropy

SOFTCAP = 20.0
MAX_MAG = 16.0  # as in cce_linear_ce.py: logits of the documented reference must fit float16
IGNORE = 0


def reference(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    B, T, _ = e.shape
    logits = e[:, :-1] @ c.T
    logits = logits if logits.dtype == torch.float64 else logits.float()
    logits = SOFTCAP * torch.tanh(logits / SOFTCAP)
    loss = F.cross_entropy(
        logits.reshape(B * (T - 1), -1), t[:, 1:].reshape(-1), ignore_index=IGNORE, reduction="none"
    )
    return loss.view(B, T - 1)


cce_softcap_shift_none = opgate.Operator(
    "cce_softcap_shift_none",
    reference=reference,
    inputs=[
        opgate.TensorSpec("e", ("B", "T", "D"), requires_grad=True, max_magnitude=MAX_MAG),
        opgate.TensorSpec("c", ("V", "D"), requires_grad=True, max_magnitude=MAX_MAG),  # any layout (see manifest)
        opgate.TensorSpec("t", ("B", "T"), dtype="int64", kind="index", high="V"),
    ],
    dims={"B": [2, 3], "T": [33, 17], "V": [5, 300], "D": [40]},
    dtypes=["float16", "bfloat16"],
    perf_dims={"B": 4, "T": 2048, "V": 32768, "D": 2048},
)


@cce_softcap_shift_none.implementation("cce", backend="triton")
def cce(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return linear_cross_entropy(
        e, c, t, ignore_index=IGNORE, softcap=SOFTCAP, reduction="none", shift=True
    )
