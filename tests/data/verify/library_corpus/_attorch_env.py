"""Shared set-up for the library corpus's attorch spec files (imported by them; defines no operator).

attorch (github.com/BobMcDear/attorch at 67c2772; not on PyPI: scripts/attorch_wheel.sh builds its wheel) asks for
the GPU's compute capability at import (its convolution kernels) and when it picks TF32 and pipelining stages, and
torch.cuda.get_device_capability() asserts "Torch not compiled with CUDA enabled" on a CPU build of torch. So:

- without a GPU the capability is answered as the H200's, (9, 0), and attorch's kernels run in Triton's
  interpreter like the other libraries' (thirty-sixth session: attorch_gelu's CPU run failed [layout] on the same
  M=1, N=2 strided case as on the H200). What the interpreter cannot show is said in the manifest (TF32);
- without a GPU and without attorch installed, `attorch` is None and `implementation()` leaves the functions
  unregistered: the spec files still load (a folder run and the manifest checks find their operators);
- on a GPU host every import error is raised: attorch pins torch 2.4 / triton 3.0 and the host has newer ones, so
  a failure there must show, as the version gap it is.

attorch's layers are nn.Modules that own their parameters. `layer()` builds one once per size, dtype and device (as
a model builds its layers once; the last few are kept) and `with_params()` calls it with the spec's tensors in place
of its parameters (torch.func.functional_call), so the reference sees the same weights and their gradients reach the
spec's inputs.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable

import torch

import opgate

if not torch.cuda.is_available():  # answered as the H200's: the kernels run in Triton's interpreter (docstring)
    torch.cuda.get_device_capability = lambda *args, **kwargs: (9, 0)
try:
    import attorch
except ImportError:
    if torch.cuda.is_available():
        raise
    attorch = None  # type: ignore[assignment]  (no GPU and no attorch: see the docstring)


def implementation(op: opgate.Operator, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`op.implementation(name, backend="triton")` where attorch imports; elsewhere the function stays unregistered."""
    if attorch is None:
        return lambda fn: fn
    return op.implementation(name, backend="triton")


def layer(cls: str, *args: Any, device: torch.device, dtype: torch.dtype, **kwargs: Any) -> torch.nn.Module:
    """attorch.<cls>(*args, **kwargs) with its parameters on `device` in `dtype` (the layers' own arguments)."""
    # One per thread too: functional_call swaps a module's parameters for the call, so two threads must not share one.
    return _layer(cls, threading.get_ident(), *args, device=device, dtype=dtype, **kwargs)


@functools.lru_cache(maxsize=8)  # the sizes in use; every fuzzed size's parameters kept would fill the GPU
def _layer(cls: str, _thread: int, *args: Any, device: torch.device, dtype: torch.dtype, **kwargs: Any
           ) -> torch.nn.Module:
    return getattr(attorch, cls)(*args, device=device, dtype=dtype, **kwargs)


def with_params(module: torch.nn.Module, params: dict[str, torch.Tensor], *args: Any) -> Any:
    """module(*args) with `params` standing in for the module's parameters of those names."""
    return torch.func.functional_call(module, params, args)
