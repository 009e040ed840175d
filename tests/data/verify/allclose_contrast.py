"""What a single fixed-shape allclose sees of the softmax twins (run with TRITON_INTERPRET=1 on CPU).

For each implementation and dtype: one call at the first declared shape (M=2, N=128), seed 0, contiguous
normal inputs, compared with the eager reference in the same dtype by torch.allclose (its defaults,
rtol=1e-5, atol=1e-8) and by torch.testing.assert_close (per-dtype defaults). Prints JSON.
"""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from softmax_spec import softmax  # noqa: E402

rows = []
for name, impl in softmax.implementations.items():
    for dtype in ("float32", "float16", "bfloat16"):
        x = torch.randn(2, 128, generator=torch.Generator().manual_seed(0)).to(getattr(torch, dtype))
        ref = softmax.reference(x)
        if "out" in impl.fn.__code__.co_varnames[: impl.fn.__code__.co_argcount + impl.fn.__code__.co_kwonlyargcount]:
            got = torch.empty_like(ref)
            impl.fn(x, out=got)
        else:
            got = impl.fn(x)
        try:
            torch.testing.assert_close(got, ref)
            assert_close = True
        except AssertionError:
            assert_close = False
        rows.append({"impl": name, "dtype": dtype, "allclose": bool(torch.allclose(got, ref)),
                     "assert_close": assert_close})
print(json.dumps(rows))
