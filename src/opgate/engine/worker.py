"""Child-process entry point: `python -m opgate.engine.worker REQUEST.json`, or `--serve` (a warm worker).

Loads one check class, runs it, writes its result as JSON; a warm worker does that for each request line it
reads on stdin. Anything that escapes (a crash, a
hang, os._exit) is seen by the parent as a missing result or a dead process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from opgate.engine import gpu_pause
from opgate.engine.atomic import write_atomically
from opgate.checks.base import CheckContext
from opgate.checks.registry import CheckSpec
from opgate.model.results import RETIRE_WORKER, CheckResult, Outcome


# cudaErrorInsufficientDriver and cudaErrorNoDevice: CUDA cannot start here at all, which is the host's state, not a
# context a check poisoned
NO_CUDA_STATUSES = (35, 100)


def cuda_context_fault() -> str:
    """After a check, ask every CUDA stack it touched whether the context still works. A sticky error
    (illegal address, launch failure) poisons the context for the rest of the process: the check's own
    verdict then cannot be trusted. Only stacks already imported are asked; nothing is initialised here."""
    faults = []
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "cuda", None) is not None:
        try:
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
        except Exception as exc:
            faults.append(f"torch: {exc}".splitlines()[0])
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            if cupy.cuda.runtime.getDeviceCount() > 0:
                cupy.cuda.runtime.deviceSynchronize()
        except Exception as exc:
            # getDeviceCount raises where CUDA has no device or driver (CUDA_VISIBLE_DEVICES=""): nothing to poison
            if getattr(exc, "status", None) not in NO_CUDA_STATUSES:
                faults.append(f"cupy: {exc}".splitlines()[0])
    runtime = sys.modules.get("cuda.bindings.runtime")
    if runtime is not None:
        try:
            err, = runtime.cudaDeviceSynchronize()
            if int(err) not in (0, *NO_CUDA_STATUSES):  # success, no driver, no device: nothing to poison
                faults.append(f"cuda.bindings: cudaDeviceSynchronize returned {getattr(err, 'name', err)}")
        except Exception as exc:
            faults.append(f"cuda.bindings: {exc}".splitlines()[0])
    return "; ".join(faults)


def allocator_fault() -> str:
    """After a check whose CUDA context still works: whether PyTorch's caching allocator does ('' when it does).
    Its bookkeeping can break without any CUDA error: a graph pool released twice has a use count below zero, and
    every later empty_cache of the process raises an internal assert (one warm worker of the forty-ninth session's
    library run: 44 runtime checks after it raised). The check's own verdict stands (its kernels ran and were
    compared before); its process cannot serve another check."""
    torch = sys.modules.get("torch")
    if torch is None or getattr(torch, "cuda", None) is None:
        return ""
    try:
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    except Exception as exc:
        return f"torch.cuda.empty_cache: {exc}".splitlines()[0]
    return ""


def retires_after(retire: bool, retire_unless_passed: bool, outcome: Outcome) -> bool:
    """Whether a warm worker exits after a task (CheckTask.retire, CheckTask.retire_unless_passed): the worker and
    its parent decide it alike, from the same result."""
    return retire or (retire_unless_passed and outcome is not Outcome.PASSED)


def run_request(request: dict[str, Any]) -> tuple[bool, Outcome]:
    """Run one check request and write its result atomically: (False when the CUDA context was left unusable, or
    the result asks for its process to end (RETIRE_WORKER), so a warm worker must exit and the next check needs a
    fresh process; the result's outcome)."""
    result_path = Path(request["result_path"])
    ctx_data = request.get("context", {})
    ctx = CheckContext(
        verb=ctx_data.get("verb", "doctor"),
        level=ctx_data.get("level", "basic"),
        options=ctx_data.get("options", {}),
        timeout_s=ctx_data.get("timeout_s"),
    )
    previous = os.environ.get(CHECK_ENV)
    os.environ[CHECK_ENV] = str(request["check_id"])  # processes the check starts inherit it: a leak names its check
    gpu_pause.begin_task(bool(request.get("pausable")))  # it waits while a measurement window is open
    try:
        check_cls = CheckSpec(request["check_id"], request["target"]).load()
        result = check_cls().run(ctx)
    except Exception as exc:  # import or construction failure of the check itself
        result = CheckResult(
            check_id=request["check_id"],
            title=request.get("title", request["check_id"]),
            outcome=Outcome.ERROR,
            reason=f"check could not be loaded: {type(exc).__name__}: {exc}",
            extra={"traceback": traceback.format_exc(limit=12)},
        )
    gpu_pause.end_task()
    if previous is None:
        os.environ.pop(CHECK_ENV, None)
    else:
        os.environ[CHECK_ENV] = previous
    fault = cuda_context_fault()
    if fault and result.outcome is not Outcome.ERROR:
        result = CheckResult(
            check_id=result.check_id, title=result.title, outcome=Outcome.ERROR,
            reason=f"check left the CUDA context unusable ({fault}); its verdict was {result.outcome.value}: "
                   f"{result.reason}",
            figures=result.figures, duration_s=result.duration_s,
            remediation="A sticky CUDA error (e.g. 700 illegal address) ends the context; the process must restart. "
                        "opgate discarded this worker; the next check runs in a fresh process.",
            extra={**result.extra, "cuda_fault": fault},
        )
    elif not fault and (broken := allocator_fault()):
        result = dataclasses.replace(result, extra={
            **result.extra, RETIRE_WORKER: f"PyTorch's caching allocator failed after this check ({broken}); "
                                           "only a new process has a working one"})
    write_atomically(result_path, json.dumps(result.to_dict()), durable=False)
    return not fault and RETIRE_WORKER not in result.extra, result.outcome


class _ProcessState:
    """What one check may change in its process and the next check of a warm worker must not inherit:
    environment variables, the working directory, torch's deterministic mode (the numerics check turns it on so
    torch.empty is NaN-poisoned; a runtime check after it would time poisoned allocations)."""

    def __init__(self) -> None:
        self.environ = dict(os.environ)
        self.cwd = os.getcwd()
        self.torch_state = self._torch_state()

    @staticmethod
    def _torch_state() -> tuple[bool, bool, bool] | None:
        torch = sys.modules.get("torch")
        if torch is None or not hasattr(torch, "are_deterministic_algorithms_enabled"):
            return None
        deterministic = getattr(torch.utils, "deterministic", None)
        return (torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
                bool(getattr(deterministic, "fill_uninitialized_memory", True)))

    def restore(self) -> None:
        if dict(os.environ) != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)
        if os.getcwd() != self.cwd:
            os.chdir(self.cwd)
        before = self.torch_state or (False, False, True)
        if self._torch_state() in (None, before):
            return  # unchanged: nothing to pay (the public setter imports torch._inductor)
        torch = sys.modules["torch"]
        from opgate.engine.torch_modes import set_deterministic

        set_deterministic(torch, before[0], warn_only=before[1])
        deterministic = getattr(torch.utils, "deterministic", None)
        if deterministic is not None:
            deterministic.fill_uninitialized_memory = before[2]


def serve(stdin: Any | None = None) -> int:
    """A warm worker: one JSON request per line on stdin, run in turn in this one process (imports, CUDA
    context, compiled kernels and loaded specs stay warm). Exits at end of input, after a request marked
    `retire` (or `retire_unless_passed`, by a check that did not pass), or when a check left the CUDA context
    unusable; the parent, which decides the same from the result, starts a fresh worker for the next."""
    if stdin is None:
        # Requests arrive on a private copy of fd 0; the checks (and the user's code they run) get /dev/null.
        stdin = os.fdopen(os.dup(0), "r")
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
    for line in stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        state = _ProcessState()
        healthy, outcome = run_request(request)
        state.restore()
        if healthy:
            # after the result is written: the parent may already start the next task, a measurement too, while this
            # gives memory back (the memory log keeps when, to compare with the run's timeline)
            began = time.time()
            gave = give_back_gpu_memory()
            log_held_gpu_memory(request["check_id"], {**gave, "gave_back_epoch": [round(began, 3),
                                                                                 round(time.time(), 3)]})
        sys.stdout.flush()
        sys.stderr.write(f"\n[opgate worker] finished {request['check_id']}\n")
        sys.stderr.flush()
        if not healthy or retires_after(bool(request.get("retire")), bool(request.get("retire_unless_passed")),
                                        outcome):
            return 0
    return 0


# GPU memory still allocated after a check above which the worker looks for unreachable tensors (a collection costs
# a fraction of a second in a process that imported torch; most checks leave nothing allocated).
LIVE_AFTER_CHECK_BYTES = 64 * 2**20


def give_back_gpu_memory() -> dict[str, Any]:
    """Return the GPU memory PyTorch's allocator cached for the check that just ended: on the H200 a library run's
    workers held 15-24 GiB each (five of them) beside dozens holding 0.5-8 GiB, the card filled, and a calibration's
    bound terms ran out of memory (twelfth H200 session, in the history of docs/benchmarks.md). The next check
    allocates again. Also CuPy's pool, and the local memory the context keeps for the largest per-thread stack a
    kernel needed (opgate/gpu/thread_stack.py). Returns what it shrank, for the memory log."""
    gave: dict[str, Any] = {}
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is not None and cuda.is_initialized():
            import gc

            collected = cuda.memory_allocated() > LIVE_AFTER_CHECK_BYTES
            if collected:  # tensors a reference cycle keeps (a traceback's frames hold the check's inputs): collected,
                gc.collect()  # so the cache below can give them back
            clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
            if clear_workspaces is not None:  # cuBLAS's per-handle workspace, which empty_cache keeps
                clear_workspaces()
            cuda.empty_cache()
            if not collected and cuda.memory_reserved() - cuda.memory_allocated() > LIVE_AFTER_CHECK_BYTES:
                # reserved blocks no tensor uses, after the cache went back: a pool still counted in use, which a
                # collection frees where a reference cycle keeps its owner alive. The one seen so far it did not
                # free: a failed CUDA graph capture's pool, kept by PyTorch itself (16,038 MiB after this collection,
                # forty-eighth session), which the graph check now releases (gpu/probes/graphs.py). The reading goes
                # to the memory log, where such a leak shows.
                gc.collect()
                cuda.empty_cache()
                gave["reserved_after_collect_mib"] = cuda.memory_reserved() >> 20
    except Exception:  # a context the check broke: the parent retires this worker anyway
        pass
    cupy = sys.modules.get("cupy")
    if cupy is not None:  # a CUDA C or CuPy implementation: CuPy's own pool keeps its blocks as torch's cache does
        from opgate.gpu.probes.device_memory import free_cupy_pools

        free_cupy_pools()
    if (cuda is not None and cuda.is_initialized()) or cupy is not None:
        from opgate.gpu.thread_stack import shrink_thread_stack

        shrank = shrink_thread_stack()
        if shrank is not None:
            gave["stack_bytes_per_thread"] = list(shrank)
    return gave


# A file to which each warm worker appends, after every check, the GPU memory it still holds once it gave back what
# it could (give_back_gpu_memory), and the largest CUDA tensors still alive with what refers to them: on the H200 a
# library run's idle workers held 2-8 GiB each (thirty-ninth session, scripts/gpu/gpu_memory_sampler.py). Opt-in:
# finding the tensors walks every object of the process.
MEMORY_LOG_ENV = "OPGATE_WORKER_MEMORY_LOG"


def log_held_gpu_memory(check_id: str, gave: dict[str, Any] | None = None) -> None:
    path = os.environ.get(MEMORY_LOG_ENV, "").strip()
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    cupy = sys.modules.get("cupy")
    if not path:
        return
    try:
        torch_used = cuda is not None and cuda.is_initialized()
        if not torch_used and cupy is None:
            return
        entry: dict[str, Any] = {"pid": os.getpid(), "check": check_id, "tensors": [], **(gave or {})}
        if cupy is not None:
            entry["cupy_pool_mib"] = cupy.get_default_memory_pool().total_bytes() >> 20
        if torch_used:
            entry.update(allocated_mib=cuda.memory_allocated() >> 20, reserved_mib=cuda.memory_reserved() >> 20)
        if entry.get("allocated_mib", 0) > 64:
            import gc

            alive = [o for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.is_cuda]
            alive.sort(key=lambda t: -t.untyped_storage().nbytes())
            for tensor in alive[:8]:
                holders = [type(r).__name__ + (f" {getattr(r, '__name__', '')}" if hasattr(r, "__name__") else "")
                           for r in gc.get_referrers(tensor)[:6]]
                entry["tensors"].append({"shape": list(tensor.shape), "dtype": str(tensor.dtype),
                                         "mib": tensor.untyped_storage().nbytes() >> 20, "referrers": holders})
        with open(path, "a") as sink:
            sink.write(json.dumps(entry) + "\n")
    except Exception:  # a diagnostic: never the check's or the worker's failure
        pass


# The check a worker is running, in its environment while it runs: a process the check starts (the implementation's
# code) inherits it, so one that outlives the run is reported against its check
# (opgate.engine.children.escaped_processes).
CHECK_ENV = "OPGATE_CHECK_ID"

# A child that may yield the CPU to its siblings (verify's sanitizer runs beside the calibration that feeds every
# numerics check) is started with this many steps of niceness; its own children inherit it.
NICE_ENV = "OPGATE_CHILD_NICE"


def lower_priority() -> None:
    step = os.environ.get(NICE_ENV, "").strip()
    if step.isdigit() and int(step) > 0:
        try:
            os.nice(int(step))
        except OSError:  # a platform without nice(): run at the parent's priority
            pass


def main(argv: list[str]) -> int:
    lower_priority()
    if os.environ.get("OPGATE_CUDA_WAIT"):  # verify on a GPU: wait for the GPU asleep (opgate/gpu/cuda_wait.py)
        from opgate.gpu.cuda_wait import apply_from_environment

        apply_from_environment()
    if len(argv) > 1 and argv[1] == "--serve":
        from opgate.engine.children import exit_without_teardown

        exit_without_teardown(serve())  # every result is on disk: the parent's run ends when the last check does
    run_request(json.loads(Path(argv[1]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
