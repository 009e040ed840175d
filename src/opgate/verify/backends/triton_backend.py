"""`triton`: a Python function that launches Triton kernels.

On a GPU the kernels run natively and every kernel they compiled leaves its IR in the report folder
(TTIR, TTGIR, LLIR, PTX and the cubin, per target, from the compiled kernel's `asm` dict). Without a
GPU the parent starts this process with TRITON_INTERPRET=1 (it must be set before triton is
imported), so the same kernels run under Triton's interpreter on CPU tensors and CI still verifies
them; the interpreter compiles nothing, so no IR exists and the result says so.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from typing import Any, Iterable

from opgate.errors import SkipCheck
from opgate.results import Figure
from opgate.verify.backends.base import (
    ImplementationChoice, PreparedImplementation, accepts_out, enable_empty_poisoning, function_runner,
    implementation_function,
)

# IR stages kept from a compiled kernel's asm dict, text first; binaries are written as bytes.
IR_STAGES = ("ttir", "ttgir", "llir", "ptx", "amdgcn", "cubin", "hsaco")
INTERPRETER_NOTE = ("no IR artefacts: TRITON_INTERPRET=1 (no GPU here) runs the kernel body in Python with "
                    "NumPy, nothing is compiled; run on a GPU to keep TTIR/TTGIR/LLIR/PTX")
BF16_CAST_NOTE = ("Triton's interpreter converts float32<->bfloat16 bit by bit in runtime/interpreter.py "
                  "(_convert_float): float32->bfloat16 truncates (cast_impl passes no rounding mode) where compiled "
                  "Triton rounds to nearest even (language/semantic.py: 'for fp downcasting default rounding mode "
                  "should be RTNE'), and bfloat16 subnormals come out wrong when widened to float32 (hardware widens "
                  "exactly: the bits shift by 16); opgate made those two casts exact in this process so correct "
                  "kernels are not charged for the interpreter's errors")


def interpreter_active() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def prepare(choice: ImplementationChoice, op: Any, dtype: str, workdir: Path) -> PreparedImplementation:
    import torch

    interpret = interpreter_active()
    if not interpret and not torch.cuda.is_available():
        raise SkipCheck("no GPU is visible and TRITON_INTERPRET=1 was not set before triton was imported; "
                        "run through `opgate verify`, which sets it for Triton implementations on CPU-only hosts")
    try:
        import triton
    except ImportError as exc:
        raise SkipCheck(f"triton cannot be imported ({exc}); pip install triton") from None
    enable_empty_poisoning()
    device = "cpu" if interpret else "cuda"
    fn = implementation_function(op, choice)
    use_out = accepts_out(fn)
    prepared = PreparedImplementation(
        choice=choice,
        device="triton-interpreter (cpu)" if interpret else device,
        run=function_runner(fn, device, use_out),
        facts={"triton": triton.__version__, "device": device, "interpreter": interpret},
        figures=[Figure("device", "Triton interpreter on CPU" if interpret else device)],
        poisoned_out=use_out,
    )
    if interpret:
        prepared.notes.append(INTERPRETER_NOTE)
        prepared.facts["ir_artefacts"] = INTERPRETER_NOTE
        fixed = make_interpreter_bf16_casts_exact()
        if fixed:
            prepared.facts["interpreter_bf16_casts_fixed"] = fixed
            prepared.facts["interpreter_bf16_note"] = BF16_CAST_NOTE
    else:
        prepared.collect_artefacts = lambda folder: save_kernels_of(fn, folder)
    return prepared


def _rtne_float32_to_bfloat16_bits(data: Any) -> Any:
    """Round float32 values to bfloat16 bit patterns, to nearest even, NaN kept quiet (as hardware does)."""
    import numpy as np

    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    is_nan = (bits & 0x7FFFFFFF) > 0x7F800000
    quiet = ((bits >> 16) | 0x0040).astype(np.uint16)
    return np.where(is_nan, quiet, rounded).reshape(np.shape(data))


def _bfloat16_bits_to_float32(data: Any) -> Any:
    """Widen bfloat16 bit patterns to float32 exactly (subnormals included): shift the bits by 16."""
    import numpy as np

    bits = np.ascontiguousarray(data).view(np.uint16).astype(np.uint32) << 16
    return bits.view(np.float32).reshape(np.shape(data))


def make_interpreter_bf16_casts_exact() -> list[str]:
    """Make the interpreter's float32<->bfloat16 casts match compiled Triton, only where they differ.

    Each direction is probed first (a value just above a bfloat16 rounding midpoint must round up; a
    bfloat16 subnormal must widen to the same float32), so a later Triton that converts correctly is left
    alone. Returns the directions patched, e.g. ["float32->bfloat16", "bfloat16->float32"].
    """
    import numpy as np

    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return []
    builder_cls = getattr(interpreter, "InterpreterBuilder", None)
    handle_cls = getattr(interpreter, "TensorHandle", None)
    original = getattr(builder_cls, "cast_impl", None)
    if builder_cls is None or handle_cls is None or original is None:
        return []
    if getattr(original, "_opgate_exact_bf16", None) is not None:
        return list(original._opgate_exact_bf16)
    builder = builder_cls.__new__(builder_cls)
    fixed: list[str] = []
    try:
        narrow_in = np.array([1.0 + 2.0**-8 + 2.0**-12], dtype=np.float32)  # nearest bfloat16: 1 + 2^-7
        narrowed = original(builder, handle_cls(narrow_in, tl.float32), tl.bfloat16)
        if int(np.asarray(narrowed.data).view(np.uint16)[0]) != int(_rtne_float32_to_bfloat16_bits(narrow_in)[0]):
            fixed.append("float32->bfloat16")
        subnormal = np.array([0x0050], dtype=np.uint16)  # a bfloat16 subnormal (~7.3e-39)
        widened = original(builder, handle_cls(subnormal, tl.bfloat16), tl.float32)
        if np.asarray(widened.data).view(np.uint32)[0] != _bfloat16_bits_to_float32(subnormal).view(np.uint32)[0]:
            fixed.append("bfloat16->float32")
    except Exception:
        return []
    if not fixed:
        return []

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        source, target = src.dtype.scalar, dst_type.scalar
        if "float32->bfloat16" in fixed and source == tl.float32 and target == tl.bfloat16:
            return handle_cls(_rtne_float32_to_bfloat16_bits(src.data), target)
        if "bfloat16->float32" in fixed and source == tl.bfloat16 and target == tl.float32:
            return handle_cls(_bfloat16_bits_to_float32(src.data), target)
        return original(self, src, dst_type)

    cast_impl._opgate_exact_bf16 = tuple(fixed)  # type: ignore[attr-defined]
    builder_cls.cast_impl = cast_impl
    return fixed


def _unwrap(obj: Any) -> Any:
    """Autotuner/Heuristics wrap a JITFunction in `.fn` (possibly several levels deep)."""
    seen = 0
    while not hasattr(obj, "device_caches") and hasattr(obj, "fn") and seen < 8:
        obj = obj.fn
        seen += 1
    return obj if hasattr(obj, "device_caches") else None


def jit_functions_near(fn: Any) -> list[Any]:
    """Triton JITFunctions an implementation can reach: its globals, closure, and user modules it imports."""
    candidates: list[Any] = []
    globals_ = getattr(fn, "__globals__", {}) or {}
    candidates.extend(globals_.values())
    closure = getattr(fn, "__closure__", None) or ()
    candidates.extend(cell.cell_contents for cell in closure if _cell_ok(cell))
    for value in list(globals_.values()):
        if isinstance(value, types.ModuleType) and _is_user_module(value):
            candidates.extend(vars(value).values())
    found: list[Any] = []
    for obj in candidates:
        jit = _unwrap(obj)
        if jit is not None and all(jit is not f for f in found):
            found.append(jit)
    return found


def _cell_ok(cell: Any) -> bool:
    try:
        _ = cell.cell_contents  # an empty cell raises
    except ValueError:
        return False
    return True


def _is_user_module(module: types.ModuleType) -> bool:
    path = getattr(module, "__file__", None) or ""
    return bool(path) and "site-packages" not in path and not path.startswith(sys.base_prefix)


def compiled_kernels(jit_functions: Iterable[Any]) -> list[Any]:
    kernels = []
    for jit in jit_functions:
        for entry in getattr(jit, "device_caches", {}).values():
            cache = entry[0] if isinstance(entry, tuple) else entry
            for kernel in getattr(cache, "values", lambda: [])():
                if hasattr(kernel, "asm"):
                    kernels.append(kernel)
    return kernels


def target_label(kernel: Any) -> str:
    target = getattr(getattr(kernel, "metadata", None), "target", None)
    if target is None:
        return "unknown-target"
    arch = getattr(target, "arch", "")
    backend = getattr(target, "backend", "gpu")
    return f"{backend}-sm{arch}" if backend == "cuda" else f"{backend}-{arch}"


def save_compiled_kernel(kernel: Any, folder: Path) -> list[str]:
    """Write one compiled kernel's IR stages as <target>/<kernel>-<hash>.<stage>; return the paths."""
    name = getattr(kernel, "name", "kernel")
    digest = str(getattr(kernel, "hash", ""))[:12]
    target_dir = Path(folder) / target_label(kernel)
    target_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for stage in IR_STAGES:
        if stage not in kernel.asm:
            continue
        body = kernel.asm[stage]
        path = target_dir / f"{name}-{digest}.{stage}" if digest else target_dir / f"{name}.{stage}"
        if isinstance(body, bytes):
            path.write_bytes(body)
        else:
            path.write_text(str(body))
        written.append(str(path))
    return written


def save_kernels_of(fn: Any, folder: Path) -> list[str]:
    written: list[str] = []
    for kernel in compiled_kernels(jit_functions_near(fn)):
        written.extend(save_compiled_kernel(kernel, folder))
    return written
