"""Which of torch's GPU kernels a spec's import replaced: a library such as FlagGems registers its own Triton kernels
as the CUDA implementations of aten operators (`flag_gems.only_enable`, through torch.library), so on the GPU a
reference written as torch.softmax runs the library's kernel, the code under test. opgate's float64 truth is computed
on the CPU; the bound terms move a case to the GPU only while no aten GPU kernel was replaced
(verify/bounds_device.py), or the budget would be derived from the kernel it judges.

torch.library records every kernel registered from Python (`torch.library._impls`, "namespace/op/dispatch key");
torch registers some itself at import, so what counts is what appeared after the first spec import began
(remember_native_kernels, called by core.spec.load_spec_file). A C++ extension's TORCH_LIBRARY_IMPL is not seen,
nor anything in a process that imported no torch before its first spec (then nothing counts as replaced).

A calibration process runs references, never implementations, so it can take the replacement back
(restore_native_kernels): the registering torch.library.Library objects are destroyed, which removes their kernels
from the dispatcher and exposes torch's own again, and its bound terms may use the GPU like any other process's.
"""

from __future__ import annotations

import sys
from typing import Any

_BEFORE_SPECS: list[frozenset[str]] = []  # the registered GPU kernels of aten ops before the first spec import


def _gpu_kernels_of_aten(torch: Any) -> frozenset[str] | None:
    registered = getattr(getattr(torch, "library", None), "_impls", None)
    if not isinstance(registered, (set, frozenset)):
        return None  # a torch without the record: nothing can be told
    return frozenset(key for key in registered if key.startswith("aten/") and "CUDA" in key.rsplit("/", 1)[-1])


def remember_native_kernels() -> None:
    """Record torch's own registrations, once per process, before a spec file is imported. Nothing is recorded while
    torch is not imported (this module never imports it: a spec is data until a backend runs it); verify's loaders
    import torch first (verify/loaded_specs.py, engine/specload.py)."""
    torch = sys.modules.get("torch")
    if _BEFORE_SPECS or torch is None:
        return
    kernels = _gpu_kernels_of_aten(torch)
    if kernels is not None:
        _BEFORE_SPECS.append(kernels)


def replaced_gpu_kernels() -> list[str]:
    """The aten operators whose GPU kernel was registered from Python since the first spec import ("op/key"),
    sorted; empty when nothing was replaced or nothing was recorded."""
    torch = sys.modules.get("torch")
    if torch is None or not _BEFORE_SPECS:
        return []
    now = _gpu_kernels_of_aten(torch) or frozenset()
    return sorted(key.split("/", 1)[1] for key in now - _BEFORE_SPECS[0])


def _aten_kernels_of(library: Any) -> frozenset[str]:
    return frozenset(key for key in getattr(library, "_op_impls", ()) if key.startswith("aten/"))


def destroy_registrations(keys: frozenset[str] | set[str]) -> list[str]:
    """Destroy every live torch.library.Library whose aten registrations are all among `keys` ("aten/op/dispatch
    key"), so the dispatcher serves the kernels registered before them (torch's own); returns the keys taken back,
    sorted. A Library that also registered something else (a CPU kernel the truth may have used) is left alone."""
    import gc

    torch = sys.modules.get("torch")
    library_class = getattr(getattr(torch, "library", None), "Library", None)
    if library_class is None or not keys:
        return []
    restored: set[str] = set()
    for library in [o for o in gc.get_objects() if isinstance(o, library_class)]:
        owned = _aten_kernels_of(library)
        if owned and owned <= set(keys):
            library._destroy()
            restored |= owned
    return sorted(restored)


def restore_native_kernels() -> list[str]:
    """Take back every aten GPU kernel a spec import replaced in this process (see the module docstring): only for a
    process that runs no implementation. Returns the operators restored ("op/key"), as replaced_gpu_kernels names
    them; what a C++ extension registered is not seen and stays."""
    replaced = replaced_gpu_kernels()
    if not replaced:
        return []
    restored = destroy_registrations({f"aten/{key}" for key in replaced})
    return [key.split("/", 1)[1] for key in restored]
