"""Checks that misbehave on purpose, to prove the runner contains them."""

from __future__ import annotations

import ctypes
import os
import signal
import time

from opgate.checks.base import Check, CheckContext
from opgate.model.results import CheckResult, Figure


class PassingCheck(Check):
    check_id = "planted.passing"
    title = "passes"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        return self.passed("all good")


class KeyedFigureCheck(Check):
    """Names its figure at the source and labels its result with what only it knows (the sizes it ran)."""

    check_id = "planted.keyed"
    title = "keys its figure"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        figure = Figure("GPU0 planted latency", 1.5, "ms", key="planted.latency", labels={"gpu": "0"})
        return self.passed("measured", figures=[figure], labels={"dims": "N=8"})


class TimeoutReadingCheck(Check):
    """Says the limit its context gives it: a verify stage's check reads its task's timeout from there."""

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        return self.passed(f"timeout {ctx.timeout_s!r}")


class SegfaultCheck(Check):
    check_id = "planted.segfault"
    title = "segfaults"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        os.kill(os.getpid(), signal.SIGSEGV)
        ctypes.string_at(0)  # in case the signal is blocked
        raise AssertionError("unreachable")


class HangCheck(Check):
    check_id = "planted.hang"
    title = "hangs"
    timeout_s = 1.5

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        time.sleep(3600)
        raise AssertionError("unreachable")


class ExitCheck(Check):
    check_id = "planted.exit"
    title = "calls os._exit"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        os._exit(7)


class RaisingCheck(Check):
    check_id = "planted.raises"
    title = "raises"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        raise RuntimeError("planted failure inside the check")


class FailingCheck(Check):
    check_id = "planted.failing"
    title = "finds a problem"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        return self.failed("planted finding", remediation="fix it")


class WarningCheck(Check):
    check_id = "planted.warning"
    title = "warns"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        return self.warned("planted warning")


class PoisonsCudaContextCheck(Check):
    """Launches a kernel that writes through a null pointer (sticky cudaErrorIllegalAddress), then claims success."""

    check_id = "planted.poisons_cuda"
    title = "poisons the CUDA context"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        import cupy

        kernel = cupy.RawKernel(r'''
        extern "C" __global__ void write_null(int *p) { p[threadIdx.x] = 1; }
        ''', "write_null")
        kernel((1,), (32,), (cupy.uint64(0),))
        return self.passed("pretends all is well")


class DiesOnceCheck(Check):
    """Kills its process the first time (leaving a marker file), passes when run again: a follow-up's target."""

    check_id = "planted.dies_once"
    title = "dies once"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        marker = ctx.options["marker"]
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(5)
        return self.passed("ran again after dying once")


class DeviceEnvCheck(Check):
    """Reports the GPU its process was given (per-GPU fan-out, opgate.doctor.fanout) and when it ran."""

    check_id = "planted.device_env"
    title = "reports CUDA_VISIBLE_DEVICES"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.model.results import Figure

        start = time.clock_gettime(time.CLOCK_MONOTONIC)
        time.sleep(2.0)  # long enough that children started together overlap even on a loaded 2-core runner
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return self.passed(f"saw CUDA_VISIBLE_DEVICES={visible}",
                           figures=[Figure("CUDA_VISIBLE_DEVICES", visible), Figure("sleep", 2.0, "s")],
                           extra={"start": start, "end": time.clock_gettime(time.CLOCK_MONOTONIC),
                                  "fanout_gpu": os.environ.get("OPGATE_FANOUT_GPU", "")})


class PidCheck(Check):
    """Passes and says which process ran it (warm-worker tests); `options["mark"]` sets a module global that a
    later check in the same process can read back."""

    check_id = "doctor.planted_pid"
    title = "reports its pid"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        global _MARK
        seen = _MARK
        _MARK = ctx.options.get("mark", _MARK)
        leak_before = os.environ.get("PLANTED_LEAK", "")
        os.environ["PLANTED_LEAK"] = "set by a check"  # the worker must not hand this to the next check
        return self.passed("ran", extra={"pid": os.getpid(), "seen_mark": seen, "leak_before": leak_before})


_MARK = ""


class KeepsMemoryCheck(Check):
    """Passes and says its process keeps what only its exit gives back (model/results.py RETIRE_WORKER), as the
    runtime check does after a failed CUDA graph capture whose pool could not be released."""

    check_id = "doctor.planted_keeps_memory"
    title = "keeps memory"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.model.results import RETIRE_WORKER

        return self.passed("ran", extra={"pid": os.getpid(), RETIRE_WORKER: "a planted leak"})


class BarrierCheck(Check):
    """Passes once `options["parties"]` checks sharing `options["folder"]` have all started (each leaves a file there),
    fails after 20 s alone: proves that many ran at the same time."""

    check_id = "planted.barrier"
    title = "meets its siblings"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from pathlib import Path

        folder = Path(ctx.options["folder"])
        (folder / f"{os.getpid()}.started").write_text("")
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline:
            if len(list(folder.glob("*.started"))) >= int(ctx.options["parties"]):
                return self.passed("met")
            time.sleep(0.05)
        return self.failed(f"only {len(list(folder.glob('*.started')))} of {ctx.options['parties']} started together")


class PausableWorkCheck(Check):
    """Side-by-side GPU work that pauses for measurement windows (engine/gpu_pause.py): `options["compile_s"]` seconds
    inside a JIT compile (quiet), then pause points every 20 ms for `options["seconds"]`; says when it waited."""

    check_id = "planted.pausable"
    title = "pauses for a measurement"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.engine import gpu_pause

        waits: list[list[float]] = []

        def point() -> None:
            before, began = gpu_pause.paused_seconds(), time.time()
            gpu_pause.pause_point()
            if gpu_pause.paused_seconds() > before:
                waits.append([began, time.time()])

        compile_s = float(ctx.options.get("compile_s", 0.0))
        compile_span: list[float] = []
        if compile_s:
            compile_span.append(time.time())
            gpu_pause.compiles_tracked(True)  # as record_compiles says where Triton's failed compiles end too
            gpu_pause.compile_began()
            time.sleep(compile_s)
            gpu_pause.compile_ended()  # waits here while a window is open
            compile_span.append(time.time())
        clock_began = gpu_pause.clock()  # its work's time, waits left out
        while gpu_pause.clock() - clock_began < float(ctx.options.get("seconds", 1.0)):
            point()
            time.sleep(0.02)
        return self.passed("worked", extra={"waits": waits, "compile_span": compile_span,
                                            "paused_s": gpu_pause.paused_seconds(), "pid": os.getpid()})


class StampCheck(Check):
    """A measurement stand-in: says when it ran (wall clock)."""

    check_id = "planted.stamp"
    title = "says when it ran"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        began = time.time()
        time.sleep(float(ctx.options.get("seconds", 0.2)))
        return self.passed("measured", extra={"span": [began, time.time()]})


# module-level, as a library's cache would be: it outlives the check in its warm worker
_HELD: list = []


class HoldsGpuMemoryCheck(Check):
    """Allocates options["mib"] MiB on the GPU and keeps them referenced after it ends, as a library's cache does."""

    check_id = "planted.holds_gpu_memory"
    title = "holds GPU memory"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        import torch

        _HELD.append(torch.empty(int(ctx.options.get("mib", 256)) * 2**20, dtype=torch.uint8, device="cuda"))
        return self.passed("holding")


class CupyPoolCheck(Check):
    """Allocates options["mib"] MiB through CuPy and drops them: CuPy's default pool keeps the blocks, as torch's
    cache does, until someone frees them."""

    check_id = "planted.cupy_pool"
    title = "leaves CuPy's pool full"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        import cupy

        block = cupy.zeros(int(ctx.options.get("mib", 256)) * 2**20, dtype=cupy.uint8)
        del block
        return self.passed(f"pool holds {cupy.get_default_memory_pool().total_bytes() >> 20} MiB")


class LocalMemoryCheck(Check):
    """Launches a CuPy kernel whose threads each keep options["kib"] KiB in a local array: the context's per-thread
    stack grows to that and stays (opgate/gpu/thread_stack.py)."""

    check_id = "planted.local_memory"
    title = "grows the context's per-thread stack"

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        import cupy

        floats = int(ctx.options.get("kib", 16)) * 256
        source = (f'extern "C" __global__ void spill(float* out, int n) {{ volatile float buf[{floats}]; '
                  f"for (int i = 0; i < {floats}; ++i) buf[i] = i * out[0]; out[threadIdx.x] = buf[n % {floats}]; }}")
        out = cupy.zeros(128, dtype=cupy.float32)
        cupy.RawKernel(source, "spill")((1,), (128,), (out, cupy.int32(7)))
        cupy.cuda.runtime.deviceSynchronize()
        return self.passed("launched")
