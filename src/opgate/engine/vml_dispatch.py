"""Resolve oneMKL's vector-math (VML) kernel choice once per process, on one thread, before torch needs it.

On the CPU torch computes a contiguous float32 / float64 unary op (erf, exp, log, sqrt, tanh, ...) through oneMKL's
VML, each intra-op thread on its own chunk (aten/src/ATen/cpu/vml.h, grain 2048 elements). oneMKL 2024.2, which
torch's x86 wheels bundle, picks each VML function's kernel on that function's first call; when the first call runs
on several threads at once, one thread can run a low-accuracy kernel over its whole chunk, though high accuracy
(VML_HA) was asked for (pytorch/pytorch#188792, open; the race stops at oneMKL 2025.0). The next call is right, so
it looks like a heisenbug.

Measured here (benchmarks/vml_first_call.py; torch 2.13 CPU wheel, oneMKL 2024.2, 2 cores): the first erf, sqrt or
exp of 3000 values in a fresh process differed from the second call on elements 1500-2999 in 34 of 120 processes,
float32 by up to 3e-4 relative and float64 by up to 3.3e-9. opgate computes float64 truths and eager baselines with
these ops, and verifies user implementations written with them: the example GELU's torch implementation returned
-0.0 for -3.9e-4 in 5 of 88 runs of the test worker, a false FAIL (a corrupted truth or baseline could as well hide a
real one). One call per function on a one-element tensor, made on one thread, resolves the choice: 0 of 120
processes differed, for about 2 ms.
"""

from __future__ import annotations

from types import ModuleType

# The torch functions aten/src/ATen/cpu/vml.h sends to oneMKL's VML (IMPLEMENT_VML_MKL), each at float32 and float64.
VML_FUNCTIONS = ("acos", "asin", "atan", "cos", "erf", "erfc", "erfinv", "exp", "log", "log10", "log2", "sin",
                 "sqrt", "tan", "tanh", "trunc")


resolved = False  # whether this process has resolved it (what the tests look at)


def resolve_vml_dispatch(torch: ModuleType) -> bool:
    """Call every VML-backed function once on one element of each float dtype, on this thread. True when it ran;
    False where torch has no MKL (nothing to resolve) or a call failed (never an error: it only guards accuracy)."""
    try:
        if not torch.backends.mkl.is_available():
            return False
        for dtype in (torch.float32, torch.float64):
            one = torch.full((1,), 0.5, dtype=dtype)  # inside every function's domain
            for name in VML_FUNCTIONS:
                getattr(torch, name)(one)
    except Exception:  # a torch without one of these functions, or a broken install: its own import says so
        return False
    global resolved
    resolved = True
    return True


def install() -> None:
    """Resolve the choice as soon as torch is imported in this process (now, if it already is)."""
    from opgate.engine.import_hooks import after_import

    after_import("torch", resolve_vml_dispatch)
