"""How an opgate child's CPU thread waits for the GPU: asleep, not spinning.

CUDA's default scheduling (CU_CTX_SCHED_AUTO) spins a core while a thread waits for the GPU whenever the process has
no more contexts than the machine has cores: always, for opgate's one-context children (CUDA Driver API, "Primary
Context Management", cuDevicePrimaryCtxSetFlags). A library run has 8 calibration processes, 16 check workers and
the sanitized children on one time-sliced GPU, so each waits long, and spinning took the cores Triton's compiles
need (H200 host, docs/benchmarks.md: a sanitized child burned 335 CPU seconds in a 300 s run). Blocking sync puts the
waiting thread to sleep. It changes no GPU time: timings come from CUDA events.

`OPGATE_CUDA_WAIT` chooses, in the check workers, sanitized children and calibration processes verify starts on a
GPU (engine.child_env, calibrator.py): "block" (the default there), "yield" (spin, giving the core up to any other
runnable thread) or "spin" (CUDA's own heuristic, untouched). Measured on the H200 host (benchmarks/cuda_wait.py,
docs/benchmarks.md): a waiting process burns a whole core with spin and none with block; 2000 small synchronised
kernels take 0.037 s blocked and 0.045 s spinning on an idle machine, 0.076 s and 0.052 s with every core busy;
softmax's report took 12.0-12.1 s blocked and 13.1-13.6 s spinning, side by side.
"""

from __future__ import annotations

import os

ENV = "OPGATE_CUDA_WAIT"
# CUctx_flags (cuda.h; CUDA Driver API, cuDevicePrimaryCtxSetFlags): the three low bits choose the scheduling
CU_CTX_SCHED_MASK = 0x07
CU_CTX_SCHED_YIELD = 0x02
CU_CTX_SCHED_BLOCKING_SYNC = 0x04
SCHEDULES = {"block": CU_CTX_SCHED_BLOCKING_SYNC, "yield": CU_CTX_SCHED_YIELD}


def wanted() -> int | None:
    """The scheduling flag OPGATE_CUDA_WAIT asks for, or None (CUDA's default)."""
    return SCHEDULES.get(os.environ.get(ENV, "").strip().lower())


def sleep_while_waiting(schedule: int = CU_CTX_SCHED_BLOCKING_SYNC) -> str:
    """Set `schedule` (blocking sync by default) on every visible device's primary context (the one PyTorch, Triton
    and CuPy share), before or after it exists. Returns "" when set, else why not (no driver, no GPU): the caller
    carries on either way."""
    try:
        from cuda.bindings import driver
    except Exception as exc:  # no cuda-bindings, or no libcuda.so.1 behind it
        return f"cuda-bindings unavailable ({type(exc).__name__})"
    try:
        (err,) = driver.cuInit(0)
        if int(err) != 0:
            return f"cuInit returned {err}"
        err, count = driver.cuDeviceGetCount()
        if int(err) != 0:
            return f"cuDeviceGetCount returned {err}"
        failures = []
        for ordinal in range(count):
            err, device = driver.cuDeviceGet(ordinal)
            err, flags, _active = driver.cuDevicePrimaryCtxGetState(device)
            if int(err) != 0:
                failures.append(f"device {ordinal}: cuDevicePrimaryCtxGetState returned {err}")
                continue
            (err,) = driver.cuDevicePrimaryCtxSetFlags(device, (int(flags) & ~CU_CTX_SCHED_MASK)
                                                        | schedule)
            if int(err) != 0:
                failures.append(f"device {ordinal}: cuDevicePrimaryCtxSetFlags returned {err}")
        return "; ".join(failures)
    except Exception as exc:  # an old driver without an entry point: CUDA's default stays
        return f"{type(exc).__name__}: {exc}"


def apply_from_environment() -> str:
    """At a child's start: the schedule the run asked for (OPGATE_CUDA_WAIT=block|yield), else CUDA's default."""
    schedule = wanted()
    return "not asked" if schedule is None else sleep_while_waiting(schedule)


def primary_context_schedule(ordinal: int = 0) -> int | None:
    """The scheduling bits of a device's primary context (for tests and reports), or None without a GPU."""
    try:
        from cuda.bindings import driver

        driver.cuInit(0)
        err, device = driver.cuDeviceGet(ordinal)
        err, flags, _active = driver.cuDevicePrimaryCtxGetState(device)
        return int(flags) & CU_CTX_SCHED_MASK if int(err) == 0 else None
    except Exception:
        return None
