"""Check 8: runtime features operators rely on, asked of the device, plus a CUDA graph smoke test."""

from __future__ import annotations

from typing import Any

from opgate.checks.base import Check, CheckContext
from opgate.errors import SkipCheck
from opgate.results import CheckResult, Figure, Threshold

FEATURE_SOURCE = "CUDA Runtime API, cudaDeviceGetAttribute / cudaDeviceGetStreamPriorityRange, " \
                 "https://docs.nvidia.com/cuda/cuda-runtime-api/"


class CudaCallError(Exception):
    pass


def _ok(result: Any) -> Any:
    """cuda-bindings returns (err, *values); raise with the error's name when err != success."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise CudaCallError(f"{getattr(err, 'name', err)} ({int(err)})")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def graph_smoke_test(rt: Any, n_bytes: int = 1 << 20) -> str:
    """Capture a memset and a copy into a graph, instantiate, replay twice, and check the bytes."""
    import ctypes

    stream = _ok(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking))
    src = _ok(rt.cudaMalloc(n_bytes))
    dst = _ok(rt.cudaMalloc(n_bytes))
    graph = exec_graph = None
    try:
        _ok(rt.cudaStreamBeginCapture(stream, rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal))
        _ok(rt.cudaMemsetAsync(src, 0x5A, n_bytes, stream))
        _ok(rt.cudaMemcpyAsync(dst, src, n_bytes, rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice, stream))
        graph = _ok(rt.cudaStreamEndCapture(stream))
        exec_graph = _ok(rt.cudaGraphInstantiate(graph, 0))
        for _ in range(2):
            _ok(rt.cudaGraphLaunch(exec_graph, stream))
        _ok(rt.cudaStreamSynchronize(stream))
        host = (ctypes.c_ubyte * n_bytes)()
        _ok(rt.cudaMemcpy(ctypes.addressof(host), dst, n_bytes, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost))
        wrong = sum(1 for b in bytes(host) if b != 0x5A)
        if wrong:
            raise CudaCallError(f"graph replay wrote {wrong} wrong bytes of {n_bytes}")
        return f"captured 2 nodes, replayed twice, {n_bytes} bytes verified"
    finally:
        if exec_graph is not None:
            rt.cudaGraphExecDestroy(exec_graph)
        if graph is not None:
            rt.cudaGraphDestroy(graph)
        rt.cudaFree(src)
        rt.cudaFree(dst)
        rt.cudaStreamDestroy(stream)


class RuntimeFeaturesCheck(Check):
    check_id = "doctor.runtime_features"
    title = "Runtime features and CUDA graph smoke test"
    timeout_s = 60.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        try:
            from cuda.bindings import runtime as rt

            count = _ok(rt.cudaGetDeviceCount())
        except CudaCallError as exc:
            raise SkipCheck(f"no usable CUDA device: cudaGetDeviceCount failed with {exc}") from None
        except Exception as exc:
            raise SkipCheck(f"no NVIDIA driver or cuda-bindings: {type(exc).__name__}: {exc}") from None
        if count == 0:
            raise SkipCheck("cudaGetDeviceCount reports no CUDA device")
        figures, problems = [], []
        attr = rt.cudaDeviceAttr
        for device in range(count):
            _ok(rt.cudaSetDevice(device))
            greatest_least = _ok(rt.cudaDeviceGetStreamPriorityRange())
            least, greatest = greatest_least
            preemption = _ok(rt.cudaDeviceGetAttribute(attr.cudaDevAttrComputePreemptionSupported, device))
            pools = _ok(rt.cudaDeviceGetAttribute(attr.cudaDevAttrMemoryPoolsSupported, device))
            figures += [
                Figure(f"GPU{device} stream priority range", f"[{greatest}, {least}]"),
                Figure(f"GPU{device} compute preemption", bool(preemption),
                       threshold=Threshold(True, "==", FEATURE_SOURCE)),
                Figure(f"GPU{device} memory pools (cudaMallocAsync)", bool(pools),
                       threshold=Threshold(True, "==", FEATURE_SOURCE)),
            ]
            if greatest == least:
                problems.append(f"GPU{device} has no stream priorities")
            if not preemption:
                problems.append(f"GPU{device} lacks compute preemption")
            if not pools:
                problems.append(f"GPU{device} lacks memory pools (cudaMallocAsync)")
            try:
                detail = graph_smoke_test(rt)
                figures.append(Figure(f"GPU{device} CUDA graph smoke test", detail))
            except CudaCallError as exc:
                return self.failed(f"GPU{device}: CUDA graph capture/replay failed: {exc}", figures=figures,
                                   remediation="Upgrade the driver; graphs need CUDA >= 10 and a working context.")
        if problems:
            return self.warned("; ".join(problems), figures=figures)
        return self.passed(f"{count} device(s): stream priorities, preemption, memory pools present; "
                           "graph capture and replay verified", figures=figures)
