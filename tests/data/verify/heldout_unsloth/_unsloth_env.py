"""Shared set-up for the held-out unsloth corpus's spec files (imported by them; defines no operator).

On a GPU host nothing is shimmed: `import unsloth` runs as it does for any user (it needs its full dependency set
there), and the specs import `unsloth.kernels.*` after it. Where that import fails (a host with only unsloth's and
unsloth_zoo's wheels), the kernels import bare as below, without the CPU shims, and stderr says why.

Without a GPU (a CPU build of torch; Triton under TRITON_INTERPRET=1, which opgate sets), three shims:

- `import unsloth` refuses a host without an accelerator ("Unsloth cannot find any torch accelerator? You need a
  GPU."), patches transformers/PEFT/TRL and needs bitsandbytes, xformers and the rest. Its Triton kernels live in
  `unsloth/kernels/*.py`, which import torch, triton, transformers (a logger, LlamaRMSNorm), `unsloth_zoo` and
  `unsloth.device_type`. `bare_packages()` registers `unsloth` and `unsloth.kernels` as package objects with the
  installed directories as their paths, without running their `__init__`s, so those submodules import as they are.
- unsloth's own CPU switches, set before anything imports unsloth_zoo: `UNSLOTH_ALLOW_CPU=1` (unsloth's and
  unsloth_zoo's "test-only CPU fallback: report 'cuda' so all cuda branches behave identically", device_type.py) and
  `UNSLOTH_IS_PRESENT=1` (what `unsloth/__init__.py` sets before it imports unsloth_zoo, whose `__init__` refuses to
  import without it).
- Triton's interpreter patches the builtins of `triton.language` that a kernel reaches through the `tl` module, not
  an alias of one held in a module global: unsloth's `kernels/utils.py` binds `triton_cast = tl.cast` (Triton >= 3)
  and the cross-entropy kernels call `triton_cast(stride, tl.int64)`, which under the interpreter raises "Did you
  forget to add @triton.jit ? (`_semantic` argument must be provided outside of JIT functions.)".
  `interpreter_builtin_aliases()` rebinds each such alias in the unsloth kernel modules the same way the interpreter
  patches `tl.cast` itself (the call passed through with the interpreter's semantic). Likewise `triton_tanh =
  libdevice.tanh`: Triton 3.9's `triton.language.extra.libdevice` functions are stubs that the compiler lowers to
  the backend's libdevice, and under the interpreter they return None (the soft-capped cross-entropy then raises
  "unsupported operand type(s) for *: 'int' and 'NoneType'"); the alias is answered with NumPy's tanh on the
  interpreter tensor's values, in their own dtype (float32 in these kernels). On a GPU nothing changes.
- `cuda_queries()`: the cross-entropy's chunked forward (vocab > 65536) asks `torch.cuda.current_device()` for the
  tensor's device index (kernels/cross_entropy_loss.py `_chunked_evict_policy`, through rope_embedding's
  `_eviction_hints_ok`) even for a CPU tensor; a CPU build of torch raises "Torch not compiled with CUDA enabled".
  It is answered with device 0, and `get_device_capability` with an H100's (9, 0), only where torch has no CUDA.
  (Added after the first run of unsloth_losses.py, which reported the unanswered query: RESULTS.md.)
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import tempfile
import types


def _has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def bare_packages() -> None:
    """Make `import unsloth.kernels.X` work without running unsloth/__init__.py or unsloth/kernels/__init__.py."""
    for name in ("unsloth", "unsloth.kernels"):
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(f"{name} is not installed (see requirements.txt)")
        package = types.ModuleType(name)
        package.__path__ = list(spec.submodule_search_locations)
        package.__file__ = spec.origin
        sys.modules[name] = package
        if "." in name:
            parent, _, child = name.rpartition(".")
            setattr(sys.modules[parent], child, package)


KERNEL_MODULES = ("utils", "rms_layernorm", "layernorm", "cross_entropy_loss", "rope_embedding", "swiglu", "geglu")


def interpreter_builtin_aliases() -> list[str]:
    """Under TRITON_INTERPRET=1 without a GPU: rebind aliases of triton.language builtins in unsloth's kernel modules
    so that the interpreter can call them (docstring); returns the names rebound."""
    if os.environ.get("TRITON_INTERPRET") != "1" or _has_gpu():
        return []
    import triton.language as tl
    from triton.runtime import interpreter

    import numpy as np

    def interpreter_tanh(x, **_kwargs):
        handle = x.handle
        data = np.tanh(handle.data).astype(handle.data.dtype)
        return tl.tensor(interpreter.TensorHandle(data, handle.dtype), x.type)

    interpreter_tanh._heldout_alias = True  # type: ignore[attr-defined]
    numpy_libdevice = {"tanh": interpreter_tanh}

    rebound = []
    for short in KERNEL_MODULES:
        module = importlib.import_module(f"unsloth.kernels.{short}")
        for name, value in list(vars(module).items()):
            if name.startswith("__") or getattr(value, "_heldout_alias", False):
                continue
            if getattr(value, "__module__", "") == "triton.language.extra.libdevice":
                if value.__name__ not in numpy_libdevice:
                    continue  # no kernel of the corpus calls it
                setattr(module, name, numpy_libdevice[value.__name__])
                rebound.append(f"unsloth.kernels.{short}.{name}")
                continue
            if not tl.core.is_builtin(value):
                continue
            if any(getattr(lang, name, None) is value for lang in (tl, tl.core, tl.math)):
                continue  # reached as tl.<name>: the interpreter patches it itself

            def alias(*args, _member=value, **kwargs):
                kwargs.pop("_semantic", None)
                return _member(*args, **kwargs, _semantic=interpreter.interpreter_semantic)

            alias._heldout_alias = True  # type: ignore[attr-defined]
            setattr(module, name, alias)
            rebound.append(f"unsloth.kernels.{short}.{name}")
    return rebound


_ORIGINAL_CUDA: dict = {}


def cuda_queries() -> None:
    """Answer the CUDA device queries of unsloth's host code on a CPU build of torch (docstring)."""
    import torch

    if torch.cuda.is_available():
        return
    _ORIGINAL_CUDA.setdefault("current_device", torch.cuda.current_device)
    _ORIGINAL_CUDA.setdefault("get_device_capability", torch.cuda.get_device_capability)

    def current_device() -> int:
        return 0

    def get_device_capability(device=None) -> tuple[int, int]:
        return (9, 0)  # NVIDIA H100: compute capability 9.0

    current_device._heldout_answer = True  # type: ignore[attr-defined]
    torch.cuda.current_device = current_device  # type: ignore[assignment]
    torch.cuda.get_device_capability = get_device_capability  # type: ignore[assignment]


def import_bare() -> None:
    """unsloth_zoo's __init__ as unsloth's runs it, then the kernel packages bare (docstring)."""
    os.environ.setdefault("UNSLOTH_IS_PRESENT", "1")
    # unsloth_zoo writes generated source into ./unsloth_compiled_cache at import: not into the corpus folder
    os.environ.setdefault("UNSLOTH_COMPILE_LOCATION",
                          os.path.join(tempfile.gettempdir(), "heldout_unsloth_compiled_cache"))
    import unsloth_zoo  # noqa: F401

    bare_packages()


# Why the full `import unsloth` did not run on this GPU host ("" where it ran, or on a CPU machine).
FULL_IMPORT_FAILED = ""
if _has_gpu():
    try:
        import unsloth  # noqa: F401  (the library as a GPU user imports it)
    except Exception as error:  # noqa: BLE001  (a host without unsloth's model-patching dependency set)
        # Added by the integrator (sixtieth session) for a GPU host that holds only unsloth's and unsloth_zoo's
        # wheels: the kernels then import bare, as on a CPU machine, without the CPU shims.
        FULL_IMPORT_FAILED = f"{type(error).__name__}: {error}"
        print(f"_unsloth_env: `import unsloth` failed ({FULL_IMPORT_FAILED}); importing its kernels bare",
              file=sys.stderr)
        import_bare()
else:
    os.environ.setdefault("UNSLOTH_ALLOW_CPU", "1")
    import_bare()
    cuda_queries()
    REBOUND = interpreter_builtin_aliases()
