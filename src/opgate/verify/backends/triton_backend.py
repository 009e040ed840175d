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

from opgate.engine import gpu_pause
from opgate.model.errors import SkipCheck
from opgate.model.results import Figure
from opgate.verify import resume
from opgate.verify.backends import autotune_choice
from opgate.verify.backends.base import (
    Backend,
    ImplementationChoice, PreparedImplementation, accepts_out, enable_empty_poisoning, function_runner,
    implementation_function,
)
from opgate.verify.backends.triton_interpreter_bf16 import (
    REDUCTION_NOTE, interpreter_bf16_limitations, make_interpreter_bf16_arithmetic_exact,
    make_interpreter_bf16_casts_exact,
)
from opgate.verify.backends.triton_interpreter_gaps import interpreter_gap

# IR stages kept from a compiled kernel's asm dict, text first; binaries are written as bytes.
IR_STAGES = ("ttir", "ttgir", "llir", "ptx", "amdgcn", "cubin", "hsaco")
INTERPRETER_NOTE = ("no IR artefacts: TRITON_INTERPRET=1 (no GPU here) runs the kernel body in Python with "
                    "NumPy, nothing is compiled; run on a GPU to keep TTIR/TTGIR/LLIR/PTX")
BF16_CAST_NOTE = ("Triton's interpreter converts to and from bfloat16 bit by bit in runtime/interpreter.py "
                  "(_convert_float, astype): float32->bfloat16 truncates (cast_impl passes no rounding mode) where "
                  "compiled Triton rounds to nearest even (language/semantic.py: 'for fp downcasting default rounding "
                  "mode should be RTNE'), bfloat16 subnormals come out wrong when widened to float32 (hardware widens "
                  "exactly: the bits shift by 16), and float64 or integers become bfloat16 as integer bit patterns; "
                  "opgate made the casts listed in interpreter_bf16_casts_fixed exact in this process")
BF16_ARITHMETIC_NOTE = ("Triton's interpreter stores bfloat16 as uint16 and computes +, *, min/max, comparisons, "
                        "tl.sum/tl.max/tl.cumsum, tl.dot, tl.fma, math functions and atomic_add on the raw bit "
                        "patterns; opgate made the ops listed in interpreter_bf16_arithmetic_fixed widen to float32 "
                        "exactly, compute, and round a bfloat16 result to nearest even, as compiled Triton does; "
                        + REDUCTION_NOTE)


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
        figures=[Figure("device", "Triton interpreter on CPU" if interpret else device, key="verify.numerics.device")],
        poisoned_out=use_out,
    )
    if interpret:
        prepared.notes.append(INTERPRETER_NOTE)
        prepared.facts["ir_artefacts"] = INTERPRETER_NOTE
        prepared.facts.update(mend_interpreter_bf16())
        if autotune_first_config_under_interpreter():
            prepared.notes.append(AUTOTUNE_NOTE)
            prepared.facts["autotune"] = AUTOTUNE_NOTE
        prepared.limitation_of = interpreter_gap  # a construct the interpreter cannot run: the GPU judges it
    else:
        prepared.collect_artefacts = lambda folder: save_kernels_of(fn, folder)
        prepared.facts["triton_jit"] = record_compiles()
        if autotune_choice.wanted():
            choose_configs(prepared)
    return prepared


def choose_configs(prepared: PreparedImplementation) -> None:
    """Until the check releases the implementation, autotuned kernels run one config per key instead of
    benchmarking them all (verify/backends/autotune_choice.py); the configs they ran go into the facts."""
    import contextlib

    scope = contextlib.ExitStack()
    ran = scope.enter_context(autotune_choice.rotating_configs())

    def finish() -> None:
        if ran:
            prepared.facts["autotune"] = {"note": autotune_choice.NOTE, "kernels": ran}

    def case_note() -> str:
        used = autotune_choice.take_used()
        return "; ".join(f"{kernel}[{config}]" for kernel, config in used.items())

    prepared.finish = finish
    prepared.release = scope.close
    prepared.case_note = case_note


AUTOTUNE_NOTE = ("autotuned kernels run their first config left after the autotuner's own pruning: Triton's "
                 "interpreter has no GPU driver to benchmark configs with (it raises '0 active drivers'); the GPU "
                 "run judges the config the autotuner picks")


def autotune_first_config_under_interpreter() -> bool:
    """Under TRITON_INTERPRET=1 with no GPU driver, make Triton's Autotuner keep only the first config its pruning
    leaves (its own single-config path: no benchmark), so autotuned kernels run on the CPU instead of raising
    "0 active drivers" at their first call; True when patched (once per process). The configs are the kernel's."""
    try:
        from triton.runtime import autotuner, driver
    except ImportError:
        return False
    try:
        driver.active  # noqa: B018  (raises without a driver: the interpreter on a CPU-only host)
        return False
    except Exception:
        pass
    if getattr(autotuner.Autotuner, "_opgate_first_config", False):
        return True
    original = autotuner.Autotuner.prune_configs

    def first_config(self: Any, kwargs: Any, *args: Any, **more: Any) -> Any:
        return original(self, kwargs, *args, **more)[:1]

    autotuner.Autotuner.prune_configs = first_config  # type: ignore[method-assign]
    autotuner.Autotuner._opgate_first_config = True  # type: ignore[attr-defined]
    return True


def _end_failed_compiles() -> bool:
    """Make a compile that raises end like one that returns (resume.compile_finished), where Triton's JITFunction
    compiles in `_do_compile` (Triton 3.4 and later); True when it does. Triton calls its post-compile hook only after
    a compile that returned, and its autotuner skips a config whose compile raised (ptxas out of resources) and runs
    the others: the compile's marks would stay, and the task would read as quiet to a measurement window while it
    runs kernels (engine/gpu_pause.py). Patched once per process."""
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return False
    compile_ = getattr(JITFunction, "_do_compile", None)
    if compile_ is None:
        return False
    if getattr(compile_, "_opgate_ends_failed_compiles", False):
        return True

    def do_compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return compile_(self, *args, **kwargs)
        except BaseException:
            resume.compile_finished()
            raise

    do_compile._opgate_ends_failed_compiles = True  # type: ignore[attr-defined]
    JITFunction._do_compile = do_compile  # type: ignore[method-assign]
    return True


def record_compiles() -> dict[str, Any]:
    """Count and time every Triton JIT compile from now on in this process (one per distinct signature and
    constexpr set, autotuning configs included), per kernel, into the dict returned: where a GPU check's first
    calls spend their time (the report's backend_facts). Uses Triton's knobs.runtime jit hooks when it has them."""
    import time

    record: dict[str, Any] = {"compiles": 0, "seconds": 0.0, "kernels": {}}
    try:
        from triton import knobs
    except ImportError:  # an older Triton: no hooks, nothing recorded
        record["unavailable"] = "this Triton has no knobs.runtime jit hooks"
        return record
    started: dict[Any, float] = {}

    def before(**kwargs: Any) -> bool:
        started[repr(kwargs.get("key"))] = time.perf_counter()
        # a case that hangs from here on hung in the compiler (LLVM's O3 on a config with thousands of elements per
        # thread ran past 240 s: fla's token_shift backward at D=65537; verify/resume.py reports such a case as not
        # judged, not as a crash), and the task is quiet for a measurement window (engine/gpu_pause.py)
        resume.compile_started(str(getattr(kwargs.get("fn"), "name", "kernel")))
        return False  # compile as usual

    def after(**kwargs: Any) -> None:
        began = started.pop(repr(kwargs.get("key")), None)
        info = kwargs.get("fn")
        name = str(getattr(info, "name", "kernel"))
        record["compiles"] += 1
        if began is not None:
            took = time.perf_counter() - began
            record["seconds"] = round(record["seconds"] + took, 4)
            # the longest single compile: a first call's stall in production too (FlagGems' skip_layer_norm at
            # N=65537: a minute, library_corpus/RESULTS.md)
            if took > record.get("slowest", {}).get("seconds", 0.0):
                record["slowest"] = {"kernel": name, "seconds": round(took, 3)}
        record["kernels"][name] = record["kernels"].get(name, 0) + 1
        resume.compile_finished()  # last: it may wait for a measurement window, which is not the compile's time

    knobs.runtime.jit_cache_hook = before
    knobs.runtime.jit_post_compile_hook = after
    gpu_pause.compiles_tracked(_end_failed_compiles())
    autotuning = getattr(knobs, "autotuning", None)
    if autotuning is not None and hasattr(autotuning, "listener"):
        # every autotuning of a new key: how long benchmarking its configs took (None when the result came from
        # the disk cache, TRITON_CACHE_AUTOTUNING): with fla's shape-keyed kernels this is where a GPU case goes
        record["autotune"] = {"runs": 0, "seconds": 0.0, "from_cache": 0}

        def tuned(**kwargs: Any) -> None:
            entry = record["autotune"]
            entry["runs"] += 1
            if kwargs.get("cache_hit") or kwargs.get("duration") is None:
                entry["from_cache"] += 1
            else:
                entry["seconds"] = round(entry["seconds"] + float(kwargs["duration"]), 4)

        autotuning.listener = tuned
    return record


def mend_interpreter_bf16() -> dict[str, Any]:
    """Make this process's Triton interpreter compute bfloat16 as compiled Triton does; the facts say what
    was patched and what is left (interpreter_bf16_limitations: a bfloat16 failure there is the
    interpreter's, the GPU run decides)."""
    facts: dict[str, Any] = {}
    casts = make_interpreter_bf16_casts_exact()  # first: constants reach bfloat16 through a cast
    if casts:
        facts["interpreter_bf16_casts_fixed"] = casts
        facts["interpreter_bf16_note"] = BF16_CAST_NOTE
    arithmetic = make_interpreter_bf16_arithmetic_exact()
    if arithmetic:
        facts["interpreter_bf16_arithmetic_fixed"] = arithmetic
        facts["interpreter_bf16_arithmetic_note"] = BF16_ARITHMETIC_NOTE
    limitations = interpreter_bf16_limitations()
    if limitations:
        facts["interpreter_bf16_limitations"] = limitations
    return facts


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


class TritonBackend(Backend):
    name = "triton"
    startup_s = 3.0
    gpu_stages = True

    def prepare(self, choice: ImplementationChoice, op: Any, dtype: str, workdir: Path) -> PreparedImplementation:
        return prepare(choice, op, dtype, workdir)

    def child_env(self, gpu: bool) -> dict[str, str]:
        # Without a GPU the kernels run under Triton's interpreter; TRITON_INTERPRET is read when triton is
        # imported, so the child must start with it.
        return {} if gpu else {"TRITON_INTERPRET": "1"}

    def case_cost_weight(self, gpu: bool) -> float:
        # Triton's CPU interpreter emulates every program instance in Python: 10^3-10^5 times a compiled case
        return 0.25 if gpu else 1.0

    def interpreter_limitations(self, prepared: PreparedImplementation, dtype: str) -> list[str]:
        """Under the interpreter in bfloat16: what opgate's fixes left wrong in this Triton (mend_interpreter_bf16);
        compiled kernels and the other dtypes have none."""
        if dtype != "bfloat16" or not prepared.facts.get("interpreter"):
            return []
        return list(interpreter_bf16_limitations())
