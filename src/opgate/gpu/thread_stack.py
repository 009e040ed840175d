"""Give back the local memory a CUDA context keeps for the largest per-thread stack any of its kernels needed.

The driver grows a context's per-thread stack (local memory: register spills, local arrays) at a launch that needs
more, and never shrinks it (CUDA Driver API, cuCtxSetLimit, CU_LIMIT_STACK_SIZE: "This size isn't reset back to the
original value after each launch"). It backs that stack for every thread the GPU can hold at once, so one Triton
kernel spilling a 65537-wide row leaves GiBs held by a process that has long finished with it. A warm worker that
ran such a check would keep them while idle; setting the limit back down releases them, and the driver grows it
again for the next launch that needs it.
"""

from __future__ import annotations

from typing import Any

# The per-thread stack of a context no kernel has grown: 1024 B from cuCtxGetLimit on a fresh context on the H100
# (scripts/gpu/local_memory_probe.py, fortieth session; it prints it for the host it runs on).
FRESH_STACK_BYTES = 1024

_driver: Any = None  # cuda.bindings.driver once imported; False where it cannot be (asked once per process)


def _cuda_driver() -> Any:
    global _driver
    if _driver is None:
        try:
            from cuda.bindings import driver

            _driver = driver
        except Exception:  # no cuda-bindings, or no libcuda.so.1 behind it
            _driver = False
    return _driver


def stack_bytes() -> int | None:
    """The current context's per-thread stack size, or None (no cuda-bindings, no context current)."""
    driver = _cuda_driver()
    if not driver:
        return None
    try:
        err, context = driver.cuCtxGetCurrent()
        if int(err) != 0 or not int(context):
            return None
        err, value = driver.cuCtxGetLimit(driver.CUlimit.CU_LIMIT_STACK_SIZE)
        return int(value) if int(err) == 0 else None
    except Exception:
        return None


def shrink_thread_stack(to_bytes: int = FRESH_STACK_BYTES) -> tuple[int, int] | None:
    """Set the current context's per-thread stack back to `to_bytes` when a kernel grew it past that; waits for
    the context's work to finish (the driver does). Returns (before, after) in bytes per thread when it shrank,
    else None."""
    before = stack_bytes()
    if before is None or before <= to_bytes:
        return None
    driver = _cuda_driver()
    try:
        (err,) = driver.cuCtxSetLimit(driver.CUlimit.CU_LIMIT_STACK_SIZE, to_bytes)
        if int(err) != 0:
            return None
    except Exception:
        return None
    after = stack_bytes()
    return (before, after) if after is not None else None
