"""Where a case's float64 bound terms run: on the GPU, where the run has one, for the cases whose reference is slow.

The bound terms (calibrate.CaseBounds: perturbation and curvature sensitivity, the accumulation bound's reverse
passes, the log-space statistic) call the float64 reference about 25 times per case. On the CPU they were the long
pole of a library run on the H200 host (ninth H200 session, in the history of docs/benchmarks.md); an H200 runs
float64 at tens of TFLOP/s. But inside a library run the GPU is busy with the run's other work, and a case whose
reference is cheap (an elementwise op, a norm) costs less on a CPU thread than there, whatever its size
(SLOW_CALLS_ONLY); what a call costs the CPU decides.

A case's terms move to the GPU only when all of these hold, else they stay on the CPU exactly as before:
- the run uses the GPU (the engine says so) and OPGATE_BOUNDS_DEVICE is not `cpu` (`cuda` forces it for any case;
  `size`, the rule before the forty-fourth session, moves every case of at least MIN_GPU_ELEMENTS too);
- no spec import replaced a GPU kernel of an aten operator (core/torch_kernels.py: FlagGems registers its Triton
  kernels for aten.softmax and others, and the reference would then run the code under test on the GPU); a
  calibration process of a GPU run takes such a replacement back before it calibrates (restore_native_kernels);
- one call of the reference on the CPU inputs costs this thread at least SLOW_REFERENCE_S, whatever the inputs'
  size: a reference can make far more than its inputs (fla's chunked cumsum pads a [1, 1, 65535] input to 64 time
  steps: 4.2 M elements, 74 ms a reverse pass, 3 s of terms for a case of 65535 elements; twenty-fourth session),
  and a large case of a cheap reference is cheaper on the CPU than on a GPU the run keeps busy (SLOW_CALLS_ONLY).
  Inputs of at least CERTAINLY_SLOW_ELEMENTS move without the call, which could only say yes;
- the reference runs on the moved inputs and gives the CPU truth back (to AGREEMENT_RTOL): a reference that makes
  CPU tensors inside, or branches on the device, keeps its terms on the CPU.
While the terms run, the process holds its GPU's host-wide lock shared (opgate.engine.gpu_guard), so a timing or recovery
check of this or another run, which holds it exclusively, never measures beside them; the memory the terms cached
is returned before the lock is.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Iterator, Sequence

DEVICE_ENV = "OPGATE_BOUNDS_DEVICE"
# OPGATE_BOUNDS_DEVICE=size: a case of at least this many float64 input elements moves whatever its call costs (the
# default until the forty-fourth session, kept for A/Bs).
MIN_GPU_ELEMENTS = 1 << 17
SIZE_RULE = "size"
# The default since the forty-fourth session: one call's CPU time decides for every case. In an H100 library run
# (forty-third session) the size rule's GPU terms took 693 ms a case beside the run's other work (3,095 cases, 88% of
# the bound-term time, the calibration the run's critical path), while the large cases of seven fla plans whose every
# reference call costs under 5 ms took 33-121 ms a case on one idle CPU thread (288-656 ms on that GPU); where calls
# cost more (short_conv's depthwise convolution, 271 ms a call at the median; a padded cumsum case, 175 ms) the GPU
# was 5-12x faster (benchmarks/bound_terms_large_cases.py). The A/B on one slower H100 host, each arm from empty
# caches (forty-fourth session, docs/benchmarks.md): with the call deciding, 1,322 cases went to the GPU instead of
# 3,243, the bound terms took 2,926 s instead of 3,257 s, 144 plans were written by 300 s instead of 129, and the
# last at 349 s instead of 379 s. `slow`, the A/B's name for it, still means it.
SLOW_CALLS_ONLY = "slow"
# float64 input elements from which one reference call surely costs SLOW_REFERENCE_S (reading 128 MiB takes a CPU
# thread longer than 5 ms), so the case moves without paying that call
CERTAINLY_SLOW_ELEMENTS = 1 << 24
# CPU seconds of one float64 reference call above which a smaller case's terms move too: they call it ~25 times and
# run ~20-50 reverse passes of its graph, so at 5 ms a call the CPU would spend a quarter of a second or more, while
# the GPU path costs a few read-backs (milliseconds each beside busy processes: benchmarks/gpu_sharing.py)
SLOW_REFERENCE_S = 0.005
# float64 on two devices differs in summation order only: ~1e-15 relative; a reference that disagrees by more than
# this computes something else on the GPU (another algorithm, a device branch) and keeps its terms on the CPU
AGREEMENT_RTOL = 1e-9
LOCK_POLL_S = 0.05
# How long the terms wait for the GPU's lock before running on the CPU instead: they need no GPU, and a measurement
# (runtime, recovery) that holds the GPU alone can run for minutes while a library's other files calibrate
LOCK_WAIT_S = 1.0
# After the terms gave up waiting, the next cases of this process only look (no wait) for this long: a measurement
# that held the lock past one case's wait mostly holds it past the next. On the H200 softmax's plans waited 2.0-2.4 s
# each in 2-3 waits, 1-2 of them given up, and their bound terms took 7.4-8.5 s against 3.7-5.8 s all on the CPU
# (scripts/gpu/softmax_idle.sh, thirty-fifth session).
LOCK_BACKOFF_S = 10.0
_BUSY_UNTIL = [0.0]  # perf_counter before which a wait is not started (set by a give-up)

_ENABLED = {"gpu": False}


def use_gpu(enabled: bool) -> None:
    """Set by the calibration (thread or process) from the run's GPU flag, before any case is calibrated."""
    _ENABLED["gpu"] = enabled


# What placing the terms cost and decided in this process (the calibration reports each plan's share:
# calibrator.calibrate_plan):
# - cpu_for_replaced_kernels: cases kept on the CPU only because a spec it loaded replaced aten's GPU kernels (the
#   calibration pool keeps such specs' plans in processes of their own: verify/calibrator.CalibrationPool);
# - gpu_lock_waits / gpu_lock_gave_up / gpu_lock_wait_ms: cases that found the GPU's lock taken (a measurement holds
#   it or waits for it), those that then ran on the CPU, and the milliseconds spent waiting;
# - gpu_out_of_memory_placing: cases whose inputs did not fit the GPU's free memory, their terms then on the CPU.
COUNTS = {"cpu_for_replaced_kernels": 0, "gpu_lock_waits": 0, "gpu_lock_gave_up": 0, "gpu_lock_wait_ms": 0,
          "gpu_out_of_memory_placing": 0}


def _wanted(reference: Any, inputs: Sequence[Any]) -> bool:
    import torch

    from opgate.core.torch_kernels import replaced_gpu_kernels

    choice = os.environ.get(DEVICE_ENV, "auto").strip().lower()
    if choice == "cpu" or not (_ENABLED["gpu"] or choice == "cuda") or not torch.cuda.is_available():
        return False
    elements = sum(int(v.numel()) for v in inputs if isinstance(v, torch.Tensor) and v.dtype == torch.float64)
    large = (choice == "cuda" or elements >= CERTAINLY_SLOW_ELEMENTS
             or (choice == SIZE_RULE and elements >= MIN_GPU_ELEMENTS))
    if replaced_gpu_kernels():  # on the GPU the reference would run the library's own kernels: the code under test
        COUNTS["cpu_for_replaced_kernels"] += int(large)  # those that move without a call (it is not paid here)
        return False
    return large or _slow_on_the_cpu(reference, inputs)


def reference_cpu_seconds(reference: Any, inputs: Sequence[Any]) -> float:
    """This thread's CPU seconds for one call of the reference (no autograd graph): not wall time (a busy host's
    waiting is no cost of the reference's), and not the process's (its other threads' work in the meantime is not
    the reference's either: on the H200 host a reference that only slept 50 ms measured over 5 ms of process CPU
    time, all of it other threads', in the GPU test run). What the reference raises goes to the caller."""
    import torch

    started = time.thread_time()
    with torch.no_grad():
        reference(*inputs)
    return time.thread_time() - started


def _slow_on_the_cpu(reference: Any, inputs: Sequence[Any]) -> bool:
    """Whether one call of the reference on the CPU inputs costs at least SLOW_REFERENCE_S of this thread's CPU."""
    try:
        return reference_cpu_seconds(reference, inputs) >= SLOW_REFERENCE_S
    except Exception:  # the terms meet it again and say so in their own words
        return False


def _moved(inputs: Sequence[Any], device: str) -> list[Any]:
    import torch

    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in inputs]


def _agrees(reference: Any, moved: Sequence[Any], truth: Sequence[Any]) -> bool:
    """Whether the reference runs on the moved inputs and returns the CPU truth (same shapes, same non-finite
    positions, values within AGREEMENT_RTOL of the largest finite magnitude)."""
    import torch

    try:
        with torch.no_grad():
            result = reference(*moved)
    except Exception:  # a device mismatch inside the reference: the CPU computes its terms
        return False
    outputs = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(outputs) != len(truth):
        return False
    for out, expected in zip(outputs, truth):
        if not isinstance(out, torch.Tensor) or out.shape != expected.shape:
            return False
        got = out.detach().cpu().to(torch.float64)
        want = expected.to(torch.float64)
        if not torch.equal(torch.isfinite(got), torch.isfinite(want)):
            return False
        finite = torch.isfinite(want)
        if bool(finite.any()):
            scale = float(want[finite].abs().max())
            if float((got[finite] - want[finite]).abs().max()) > AGREEMENT_RTOL * max(scale, 1e-300):
                return False
    return True


@contextlib.contextmanager
def _shared_gpu_lock() -> Iterator[bool]:
    """This process's GPU lock, shared, held while the terms run; yields False (nothing held) when a measurement
    (this run's or another's) holds the GPU or waits for it past LOCK_WAIT_S (for LOCK_BACKOFF_S after a give-up:
    at once): the terms then run on the CPU instead of waiting on."""
    from opgate.engine.gpu_guard import SHARED, GpuLockRequest, keys_from_nvml, wait_limit_s

    request = GpuLockRequest(keys_from_nvml(None), SHARED, holder="calibration bound terms")
    began = time.perf_counter()
    # just after a give-up, one look and no wait
    deadline = began if began < _BUSY_UNTIL[0] else began + min(LOCK_WAIT_S, wait_limit_s())
    try:
        held = request.poll()
        if not held:
            COUNTS["gpu_lock_waits"] += 1
            while not held and time.perf_counter() <= deadline:
                time.sleep(LOCK_POLL_S)
                held = request.poll()
            COUNTS["gpu_lock_wait_ms"] += round(1000 * (time.perf_counter() - began))
            COUNTS["gpu_lock_gave_up"] += int(not held)
            if not held:
                _BUSY_UNTIL[0] = time.perf_counter() + LOCK_BACKOFF_S
        yield held
    finally:
        request.release()


def _give_memory_back(torch: Any) -> None:
    """Return every byte the terms left cached: the allocator's blocks and cuBLAS's workspace, which the caching
    allocator holds per handle once a term reduced with cuBLAS (torch.dot: 32 MiB on the H200, which
    torch.cuda.empty_cache keeps)."""
    torch.cuda.synchronize()
    clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear_workspaces is not None:
        clear_workspaces()
    torch.cuda.empty_cache()


@contextlib.contextmanager
def placed(reference: Any, inputs: Sequence[Any], truth: Sequence[Any]) -> Iterator[tuple[list[Any], str]]:
    """The float64 inputs the bound terms should use, and their device ("cuda" or "cpu"; see the module doc)."""
    if not _wanted(reference, inputs):
        yield list(inputs), "cpu"
        return
    import torch

    from opgate.gpu.judge.oom import exception_is_out_of_memory

    with contextlib.ExitStack() as on_gpu:
        if not on_gpu.enter_context(_shared_gpu_lock()):
            on_gpu.close()
            yield list(inputs), "cpu"
            return
        on_gpu.callback(_give_memory_back, torch)  # before the lock: a recovery check fills the card
        moved: list[Any] = []
        try:
            moved = _moved(inputs, "cuda")
            agrees = _agrees(reference, moved, truth)
        except Exception as exc:  # a full card (on the H100 host ten plans failed here, 13-26 MiB free): the CPU's
            if not exception_is_out_of_memory(exc):  # terms are the same float64 arithmetic, only slower
                raise
            moved.clear()
            COUNTS["gpu_out_of_memory_placing"] += 1
            agrees = False
        try:
            if agrees:
                yield moved, "cuda"
                return
        finally:
            moved.clear()  # the caller's view of the list too: nothing holds GPU memory when the cache is emptied
    yield list(inputs), "cpu"  # outside the lock: the CPU's terms hold up no one's measurement
