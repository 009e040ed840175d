"""Planted bugs for compute-sanitizer, each with a clean twin; CUDA C compiled with NVRTC through CuPy.

    python3 tests/data/gpu/gpu_planted.py CASE bug|clean

runs one program (gpu_sanitizer_tool.py beside it runs it under the matching tool). Each bug must be reported by
its tool and each clean twin must pass the same tool with no error and a verified result:

* oob_write (memcheck): a kernel with no bounds check writes past the end of a cudaMalloc buffer.
* shared_race (racecheck): warps exchange shared-memory words without __syncthreads().
* uninit_read (initcheck): a kernel reads device memory nothing ever wrote.
* free_async_race (memcheck, stream-ordered race tracking): cudaFreeAsync on stream A while a kernel on
  stream B still reads the buffer, with no event ordering the two.
* divergent_barrier (synccheck): a __syncthreads() only half of a warp reaches.

Exit codes of the program: 0 ran (clean twins: and verified), 1 a clean twin computed a wrong result,
2 bad usage, 3 a CUDA error was raised (expected for some bugs under the sanitizer), 4 not supported here.
Buffers come from cudaMalloc / cudaMallocAsync directly (never CuPy's pool), so the sanitizer sees the
exact allocation sizes.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Callable

PLANTED_SOURCE = r"""
typedef unsigned long long u64;

__device__ __forceinline__ u64 planted_globaltimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// oob_write ---------------------------------------------------------------------------------------
extern "C" __global__ void planted_oob_write(int* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = i;  // BUG: no `if (i < n)`; the grid is rounded up past n
}
extern "C" __global__ void clean_bounded_write(int* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i;
}

// shared_race -------------------------------------------------------------------------------------
extern "C" __global__ void planted_shared_race(const int* in, int* out) {
    __shared__ int tile[256];
    const int t = threadIdx.x;
    tile[t] = in[blockIdx.x * 256 + t];
    // BUG: no __syncthreads(): the read below takes a word written by another warp
    out[blockIdx.x * 256 + t] = tile[(t + 32) & 255];
}
extern "C" __global__ void clean_shared_exchange(const int* in, int* out) {
    __shared__ int tile[256];
    const int t = threadIdx.x;
    tile[t] = in[blockIdx.x * 256 + t];
    __syncthreads();
    out[blockIdx.x * 256 + t] = tile[(t + 32) & 255];
}

// uninit_read -------------------------------------------------------------------------------------
extern "C" __global__ void planted_uninit_read(const int* src, int* dst, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = 2 * src[i];  // the host never wrote src: BUG
}
extern "C" __global__ void clean_init_read(const int* src, int* dst, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = 2 * src[i];
}

// free_async_race ---------------------------------------------------------------------------------
extern "C" __global__ void planted_freed_reader(const int* buf, int* out, int n, u64 wait_ns) {
    const u64 start = planted_globaltimer();
    while (planted_globaltimer() - start < wait_ns) { }
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = buf[i];  // BUG on the host side: buf was freed on another stream meanwhile
}
extern "C" __global__ void clean_ordered_reader(const int* buf, int* out, int n, u64 wait_ns) {
    const u64 start = planted_globaltimer();
    while (planted_globaltimer() - start < wait_ns) { }
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = buf[i];
}

// divergent_barrier -------------------------------------------------------------------------------
extern "C" __global__ void planted_divergent_barrier(int* out) {
    __shared__ int s[32];
    const int t = threadIdx.x;
    s[t] = t;
    if (t < 16) __syncthreads();  // BUG: half of the warp never reaches this barrier (it exits)
    out[t] = s[t] + 1;
}
extern "C" __global__ void clean_uniform_barrier(int* out) {
    __shared__ int s[32];
    const int t = threadIdx.x;
    s[t] = t;
    __syncthreads();
    out[t] = s[31 - t] + 1;
}
"""


@dataclass(frozen=True)
class PlantedCase:
    name: str
    tool: str
    what: str
    bug_kernel: str
    clean_kernel: str
    expected_kinds: tuple[str, ...]  # finding kinds (opgate.gpu.probes.sanitizer) that count as catching the bug
    tool_options: tuple[tuple[str, str], ...] = ()  # (option, value), passed when the sanitizer knows them


PLANTED_CASES: tuple[PlantedCase, ...] = (
    PlantedCase("oob_write", "memcheck", "a kernel without a bounds check writes past the end of a cudaMalloc "
                "buffer", "planted_oob_write", "clean_bounded_write", ("invalid_access",)),
    PlantedCase("shared_race", "racecheck", "warps exchange shared-memory words without __syncthreads()",
                "planted_shared_race", "clean_shared_exchange", ("race", "hazard"),
                (("--racecheck-report", "analysis"),)),
    PlantedCase("uninit_read", "initcheck", "a kernel reads device memory nothing wrote", "planted_uninit_read",
                "clean_init_read", ("uninitialized_read",)),
    PlantedCase("free_async_race", "memcheck", "cudaFreeAsync on one stream while a kernel on another stream "
                "still reads the buffer, with no event between them", "planted_freed_reader",
                "clean_ordered_reader", ("stream_ordered_race", "invalid_access"),
                (("--track-stream-ordered-races", "all"),)),
    PlantedCase("divergent_barrier", "synccheck", "a __syncthreads() only half of a warp reaches",
                "planted_divergent_barrier", "clean_uniform_barrier", ("barrier_error",)),
)
CASES_BY_NAME = {case.name: case for case in PLANTED_CASES}


class CleanTwinWrong(Exception):
    """A clean twin computed a wrong result: the sanitizer run would prove nothing."""


class NotSupportedHere(Exception):
    """The device cannot run this case (e.g. no memory pools for cudaMallocAsync)."""


def _module(cupy: Any) -> Any:
    return cupy.RawModule(code=PLANTED_SOURCE, options=("-std=c++17", "-lineinfo"))


def _h2d(cupy: Any, dst: int, array: Any) -> None:
    rt = cupy.cuda.runtime
    rt.memcpy(dst, array.ctypes.data, array.nbytes, rt.memcpyHostToDevice)


def _d2h(cupy: Any, np: Any, src: int, count: int) -> Any:
    rt = cupy.cuda.runtime
    host = np.empty(count, dtype=np.int32)
    rt.memcpy(host.ctypes.data, src, host.nbytes, rt.memcpyDeviceToHost)
    return host


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise CleanTwinWrong(what)


def run_oob_write(cupy: Any, np: Any, module: Any, bug: bool) -> str:
    rt = cupy.cuda.runtime
    n = 1000
    out = rt.malloc(n * 4)
    try:
        grid = ((n + 255) // 256,)  # 1024 threads for 1000 elements: 24 threads past the end
        name = "planted_oob_write" if bug else "clean_bounded_write"
        module.get_function(name)(grid, (256,), (np.uint64(out), np.int32(n)))
        rt.deviceSynchronize()
        if not bug:
            _check(np.array_equal(_d2h(cupy, np, out, n), np.arange(n, dtype=np.int32)), "bounded write")
        return f"{name}: {grid[0] * 256} threads over {n} ints"
    finally:
        rt.free(out)


def run_shared_race(cupy: Any, np: Any, module: Any, bug: bool) -> str:
    rt = cupy.cuda.runtime
    blocks = 4
    n = blocks * 256
    values = np.random.default_rng().integers(1, 1 << 30, size=n, dtype=np.int32)
    src, out = rt.malloc(n * 4), rt.malloc(n * 4)
    try:
        _h2d(cupy, src, values)
        name = "planted_shared_race" if bug else "clean_shared_exchange"
        module.get_function(name)((blocks,), (256,), (np.uint64(src), np.uint64(out)))
        rt.deviceSynchronize()
        if not bug:
            expected = values.reshape(blocks, 256)[:, (np.arange(256) + 32) & 255].reshape(-1)
            _check(np.array_equal(_d2h(cupy, np, out, n), expected), "shared exchange")
        return f"{name}: {blocks} blocks of 256 threads"
    finally:
        rt.free(src)
        rt.free(out)


def run_uninit_read(cupy: Any, np: Any, module: Any, bug: bool) -> str:
    rt = cupy.cuda.runtime
    n = 4096
    src, dst = rt.malloc(n * 4), rt.malloc(n * 4)
    try:
        values = np.random.default_rng().integers(1, 1 << 20, size=n, dtype=np.int32)
        if not bug:
            _h2d(cupy, src, values)  # the clean twin initializes what the kernel reads
        name = "planted_uninit_read" if bug else "clean_init_read"
        module.get_function(name)(((n + 255) // 256,), (256,), (np.uint64(src), np.uint64(dst), np.int32(n)))
        rt.deviceSynchronize()
        result = _d2h(cupy, np, dst, n)  # dst is fully written by the kernel in both variants
        if not bug:
            _check(np.array_equal(result, 2 * values), "read of initialized memory")
        return f"{name}: {n} ints"
    finally:
        rt.free(src)
        rt.free(dst)


def run_free_async_race(cupy: Any, np: Any, module: Any, bug: bool) -> str:
    rt = cupy.cuda.runtime
    if not rt.deviceGetAttribute(rt.cudaDevAttrMemoryPoolsSupported, cupy.cuda.Device().id):
        raise NotSupportedHere("the device has no memory pools: cudaMallocAsync/cudaFreeAsync are unavailable")
    n = 1 << 16
    values = np.random.default_rng().integers(1, 1 << 30, size=n, dtype=np.int32)
    stream_a = cupy.cuda.Stream(non_blocking=True)
    stream_b = cupy.cuda.Stream(non_blocking=True)
    out = rt.malloc(n * 4)
    try:
        buf = rt.mallocAsync(n * 4, stream_a.ptr)
        rt.memcpyAsync(buf, values.ctypes.data, n * 4, rt.memcpyHostToDevice, stream_a.ptr)
        stream_a.synchronize()  # allocated and filled: every stream may use it from here
        name = "planted_freed_reader" if bug else "clean_ordered_reader"
        with stream_b:
            module.get_function(name)(((n + 255) // 256,), (256,),
                                      (np.uint64(buf), np.uint64(out), np.int32(n), np.uint64(20_000_000)))
        if bug:
            rt.freeAsync(buf, stream_a.ptr)  # BUG: nothing orders this after the reader on stream B
        else:
            reader_done = cupy.cuda.Event()
            reader_done.record(stream_b)
            stream_a.wait_event(reader_done)
            rt.freeAsync(buf, stream_a.ptr)
        stream_a.synchronize()
        stream_b.synchronize()
        if not bug:
            _check(np.array_equal(_d2h(cupy, np, out, n), values), "ordered reader")
        return f"{name}: reader on stream B, cudaFreeAsync on stream A " + ("unordered" if bug else "after an event")
    finally:
        rt.free(out)


def run_divergent_barrier(cupy: Any, np: Any, module: Any, bug: bool) -> str:
    rt = cupy.cuda.runtime
    out = rt.malloc(32 * 4)
    try:
        name = "planted_divergent_barrier" if bug else "clean_uniform_barrier"
        module.get_function(name)((1,), (32,), (np.uint64(out),))
        rt.deviceSynchronize()
        if not bug:
            _check(np.array_equal(_d2h(cupy, np, out, 32), np.arange(32, 0, -1, dtype=np.int32)), "uniform barrier")
        return f"{name}: one warp"
    finally:
        rt.free(out)


RUNNERS: dict[str, Callable[[Any, Any, Any, bool], str]] = {
    "oob_write": run_oob_write,
    "shared_race": run_shared_race,
    "uninit_read": run_uninit_read,
    "free_async_race": run_free_async_race,
    "divergent_barrier": run_divergent_barrier,
}


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in RUNNERS or argv[2] not in ("bug", "clean"):
        print(f"usage: gpu_planted.py {{{','.join(RUNNERS)}}} bug|clean", file=sys.stderr)
        return 2
    case, variant = argv[1], argv[2]
    record: dict[str, Any] = {"case": case, "variant": variant}
    try:
        import numpy as np

        from opgate.gpu.probes.device import require_gpu

        cupy = require_gpu()
        record["detail"] = RUNNERS[case](cupy, np, _module(cupy), variant == "bug")
        record["status"] = "ran" if variant == "bug" else "verified"
        code = 0
    except CleanTwinWrong as exc:
        record.update(status="wrong", detail=f"clean twin computed a wrong result: {exc}")
        code = 1
    except NotSupportedHere as exc:
        record.update(status="unsupported", detail=str(exc))
        code = 4
    except Exception as exc:  # a CUDA error: expected for bugs under a sanitizer that stops the kernel
        record.update(status="cuda_error", detail=f"{type(exc).__name__}: {exc}")
        code = 3
    print("OPGATE_PLANTED " + json.dumps(record), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
