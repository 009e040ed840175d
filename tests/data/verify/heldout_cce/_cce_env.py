"""Shared set-up for the held-out cut-cross-entropy corpus's spec files (imported by them; defines no operator).

What it changes, and only where torch sees no CUDA GPU and TRITON_INTERPRET=1 (opgate sets it for Triton
implementations on a CPU host): cut_cross_entropy.tl_utils binds
`from triton.language.extra import libdevice as tl_libdevice` and its jitted helpers `tl_log1p` (used by
`tl_logaddexp`, i.e. by every LSE forward) and `tl_tanh` (used by `tl_softcapping`, forward and backward with
`softcap=`) call `tl_libdevice.log1p` / `tl_libdevice.tanh`. In Triton 3.9 these libdevice functions are stubs that
the compiler lowers to the GPU backend's libdevice; under the CPU interpreter they return None and the kernel raises
"'NoneType' object has no attribute 'dtype'". `interpreter_libdevice()` rebinds the module global
`cut_cross_entropy.tl_utils.tl_libdevice` to a namespace whose `log1p` and `tanh` compute NumPy's log1p / tanh on
the interpreter tensor's values in their own dtype (float32 in these kernels), and forwards every other attribute
to the real libdevice module. Nothing in the installed library's files is modified, no other function is
replaced, and on a GPU host (or without TRITON_INTERPRET=1) nothing is changed at all.
"""

from __future__ import annotations

import os
import types


def _has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def interpreter_libdevice() -> bool:
    """Rebind cut_cross_entropy.tl_utils.tl_libdevice under the CPU interpreter (see the module docstring).
    Returns True when it did."""
    if os.environ.get("TRITON_INTERPRET") != "1" or _has_gpu():
        return False
    import numpy as np
    import triton.language as tl
    from triton.language.extra import libdevice
    from triton.runtime import interpreter

    import cut_cross_entropy.tl_utils as tl_utils

    if getattr(tl_utils.tl_libdevice, "_heldout_cce_shim", False):
        return True

    def _numpy_unary(fn):
        def call(x, **_kwargs):
            handle = x.handle
            data = fn(handle.data).astype(handle.data.dtype)
            return tl.tensor(interpreter.TensorHandle(data, handle.dtype), x.type)

        return call

    class _Shim(types.SimpleNamespace):
        def __getattr__(self, name):  # anything else: the real module
            return getattr(libdevice, name)

    tl_utils.tl_libdevice = _Shim(
        log1p=_numpy_unary(np.log1p), tanh=_numpy_unary(np.tanh), _heldout_cce_shim=True
    )
    return True


interpreter_libdevice()
