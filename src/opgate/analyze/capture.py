"""Compile every Triton kernel a spec's launcher starts, for one target GPU, on a machine without a GPU.

The convention (documented in docs/analyze.md): a `triton` implementation in a spec is the Python launcher
users call in production, e.g. `kernel[grid](x, y, n, BLOCK=1024, num_warps=4)`. opgate runs it on CPU
tensors with:

- a compile-only Triton driver (`CompileOnlyDriver`) made active, which reports the target under analysis
  (`GPUTarget("cuda", 90, 32)`) to everything that asks: JITFunction's binder, and kernel code that branches
  on `tl.target_info.cuda_capability_geq(...)` or native TMA support, so each target compiles the variant it
  would really run;
- `JITFunction.run` patched to compile (`warmup=True`: Triton's own specialization, options and cache) and
  record the compiled kernel instead of launching it;
- `Autotuner.run` patched to compile every config instead of benchmarking them.

Each launch thus goes through exactly the path a real launch takes up to the point where a GPU is needed.
A launcher that needs a GPU for anything else (CUDA tensors, device queries beyond the stand-in properties,
reading results) fails its capture with that error. Use this in a child process: it patches Triton globally.
"""

from __future__ import annotations

import contextlib
import contextvars
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterator

from opgate.core.limits import SmLimits

# The autotune config a launch is compiled under, for labels ("" outside an autotuner).
_current_config: contextvars.ContextVar[str] = contextvars.ContextVar("opgate_autotune_config", default="")


class GpuNeededError(RuntimeError):
    """The launcher asked the driver for something only a real GPU can give."""


class _CompileOnlyUtils:
    """Stand-in for `driver.active.utils`: device properties from opgate's SM limits, nothing that loads code."""

    def __init__(self, limits: SmLimits, sm_count: int) -> None:
        self._limits = limits
        self._sm_count = sm_count

    def get_device_properties(self, device: int) -> dict[str, int]:
        return {
            "max_shared_mem": self._limits.smem_per_block_optin,
            "max_num_regs": self._limits.regs_per_sm,
            "multiprocessor_count": self._sm_count,
            "warpSize": self._limits.warp_size,
            "max_threads_per_multi_processor": self._limits.max_threads_per_sm,
        }

    def __getattr__(self, name: str) -> Any:
        raise GpuNeededError(f"the launcher called driver.active.utils.{name}, which needs a GPU; "
                             "opgate analyze compiles without one")


class CompileOnlyDriver:
    """A Triton driver that knows its target but has no device: compiling works, launching cannot."""

    def __init__(self, arch: int, limits: SmLimits, sm_count: int) -> None:
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", arch, 32)
        self.utils = _CompileOnlyUtils(limits, sm_count)

    @classmethod
    def is_active(cls) -> bool:
        return False

    def get_current_target(self) -> Any:
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def set_current_device(self, device: int) -> None:
        return None

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")

    def get_benchmarker(self) -> Any:
        raise GpuNeededError("the launcher asked Triton for a benchmarker, which needs a GPU")

    def __getattr__(self, name: str) -> Any:
        raise GpuNeededError(f"the launcher called driver.active.{name}, which needs a GPU; "
                             "opgate analyze compiles without one")


@dataclass
class CompiledLaunch:
    """One kernel launch the launcher made, compiled for the target (or the error compiling it)."""

    kernel_name: str
    config: str  # autotune config, "" when not autotuned
    compiled: Any = None  # triton.compiler.CompiledKernel
    error: BaseException | None = None
    error_trace: str = ""
    context: dict[str, Any] = field(default_factory=dict)  # dtype / dims the launcher ran with


class LaunchRecorder:
    """The launches recorded so far, and the dtype/dims context to tag the next ones with."""

    def __init__(self) -> None:
        self.records: list[CompiledLaunch] = []
        self.context: dict[str, Any] = {}

    @contextlib.contextmanager
    def tagged(self, **context: Any) -> Iterator[None]:
        self.context = dict(context)
        try:
            yield
        finally:
            self.context = {}


@contextlib.contextmanager
def compile_only(arch: int, limits: SmLimits, sm_count: int) -> Iterator[LaunchRecorder]:
    """Make the compile-only driver active and record launches; restores Triton on exit."""
    from triton.runtime import autotuner, jit
    from triton.runtime.driver import driver

    recorder = LaunchRecorder()
    original_jit_run = jit.JITFunction.run
    original_autotune_run = autotuner.Autotuner.run
    previous_driver = driver._active  # restored as-is; reset_active() would look for a real GPU

    def recording_run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        record = CompiledLaunch(kernel_name=self.fn.__name__, config=_current_config.get(),
                                context=dict(recorder.context))
        try:
            record.compiled = original_jit_run(self, *args, grid=grid, warmup=True, **kwargs)
        except Exception as exc:  # a compile error is this kernel's result, not the launcher's end
            record.error = exc
            record.error_trace = traceback.format_exc(limit=6)
        recorder.records.append(record)
        return None

    def autotune_all_configs(self: Any, *args: Any, **kwargs: Any) -> None:
        for config in self.configs:
            token = _current_config.set(str(config))
            try:
                self.fn.run(*args, **kwargs, **config.all_kwargs())
            finally:
                _current_config.reset(token)
        return None

    driver.set_active(CompileOnlyDriver(arch, limits, sm_count))
    jit.JITFunction.run = recording_run  # type: ignore[method-assign]
    autotuner.Autotuner.run = autotune_all_configs  # type: ignore[method-assign]
    try:
        yield recorder
    finally:
        jit.JITFunction.run = original_jit_run  # type: ignore[method-assign]
        autotuner.Autotuner.run = original_autotune_run  # type: ignore[method-assign]
        driver._active = previous_driver
