"""Shared set-up for the held-out corpus's mamba-ssm spec files (imported by them; defines no operator).

Shims, only where there is no GPU (the first also on a GPU host whose install skipped the CUDA extension):

- mamba_ssm's package `__init__` imports the compiled CUDA extension (`import selective_scan_cuda`, absent from a
  `MAMBA_SKIP_CUDA_BUILD=TRUE` install) and the model classes (tilelang, quack). Its Triton ops live in
  `mamba_ssm.ops.triton.*`, whose `__init__`s are empty and which import only torch, triton, einops, packaging and
  `mamba_ssm.utils.*`. `bare_package()` registers `mamba_ssm` as a package object with the installed directory as
  its path, without running its `__init__`, so those submodules import as they are.
- its host wrappers enter `torch.cuda.device(x.device.index)` around each launch and size the backward's partial
  sums by `torch.cuda.get_device_properties(x.device).multi_processor_count`; a CPU build of torch fails on both
  (index None: "'<' not supported between 'NoneType' and 'int'"). `cuda_queries()` makes the first a no-op context
  and answers the second with an H100 SXM's 132 SMs (its datasheet), only where torch has no CUDA.
- Triton's autotuner benchmarks its configs through the active GPU driver, and under TRITON_INTERPRET=1 with no GPU
  driver it raises "0 active drivers". `interpreter_autotune_first_config()` keeps the first config the autotuner's
  own pruning leaves (the same shim as library_corpus/_corpus_env.py, rewritten here); on a GPU nothing changes.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types


def _no_gpu_driver() -> bool:
    try:
        from triton.runtime import driver

        driver.active  # noqa: B018  (raises when no driver is active)
        return False
    except Exception:
        return True


def bare_package() -> None:
    """Make `import mamba_ssm.ops.triton.X` work without running mamba_ssm/__init__.py (CUDA extension import)."""
    if "mamba_ssm" in sys.modules:
        return
    spec = importlib.util.find_spec("mamba_ssm")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("mamba_ssm is not installed (see requirements.txt)")
    package = types.ModuleType("mamba_ssm")
    package.__path__ = list(spec.submodule_search_locations)
    package.__file__ = spec.origin
    sys.modules["mamba_ssm"] = package


def interpreter_autotune_first_config() -> bool:
    """Patch Triton's Autotuner to run the first pruned config under the CPU interpreter; True when patched."""
    if os.environ.get("TRITON_INTERPRET") != "1" or not _no_gpu_driver():
        return False
    from triton.runtime import autotuner

    if getattr(autotuner.Autotuner, "_heldout_first_config", False):
        return True
    original = autotuner.Autotuner.prune_configs

    def first_config(self, kwargs, *args, **kw):  # type: ignore[no-untyped-def]
        return original(self, kwargs, *args, **kw)[:1]

    autotuner.Autotuner.prune_configs = first_config  # type: ignore[method-assign]
    autotuner.Autotuner._heldout_first_config = True  # type: ignore[attr-defined]
    return True


class _NoDevice:
    """Stands in for torch.cuda.device(index) without a GPU: the interpreter runs on the CPU, there is none to set."""

    def __init__(self, device: object) -> None:
        self.device = device

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def cuda_queries() -> None:
    """Answer mamba_ssm's two CUDA queries on a CPU build of torch (docstring); nothing changes where CUDA is."""
    import torch

    if torch.cuda.is_available():
        return
    h100_sms = 132  # NVIDIA H100 SXM5: 132 SMs (H100 datasheet)
    torch.cuda.device = _NoDevice  # type: ignore[assignment,misc]
    torch.cuda.get_device_properties = lambda *args, **kwargs: types.SimpleNamespace(  # type: ignore[assignment]
        multi_processor_count=h100_sms, name="cpu (Triton interpreter)")


try:
    import torch

    _HAS_GPU = torch.cuda.is_available()
except ImportError:
    _HAS_GPU = False
if not _HAS_GPU or importlib.util.find_spec("selective_scan_cuda") is None:
    bare_package()  # on a GPU too where the CUDA extension was not built (MAMBA_SKIP_CUDA_BUILD=TRUE)
if not _HAS_GPU:
    cuda_queries()
interpreter_autotune_first_config()
