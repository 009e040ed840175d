"""Check 8: runtime features operators rely on, asked of the device, plus a CUDA graph smoke test."""

from __future__ import annotations

from opgate.checks.base import Check, CheckContext
from opgate.model.errors import SkipCheck
from opgate.gpu.probes.device import CudaCallError
from opgate.gpu.probes.device import cuda_result as _ok
from opgate.gpu.probes.graphs import graph_smoke_test
from opgate.model.results import CheckResult, Figure, Threshold, gpu_labels

FEATURE_SOURCE = "CUDA Runtime API, cudaDeviceGetAttribute / cudaDeviceGetStreamPriorityRange, " \
                 "https://docs.nvidia.com/cuda/cuda-runtime-api/"


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
                Figure(f"GPU{device} stream priority range", f"[{greatest}, {least}]",
                       key="runtime_features.stream_priority_range", labels=gpu_labels(device)),
                Figure(f"GPU{device} compute preemption", bool(preemption),
                       threshold=Threshold(True, "==", FEATURE_SOURCE), key="runtime_features.compute_preemption",
                       labels=gpu_labels(device)),
                Figure(f"GPU{device} memory pools (cudaMallocAsync)", bool(pools),
                       threshold=Threshold(True, "==", FEATURE_SOURCE),
                       key="runtime_features.memory_pools_cudamallocasync", labels=gpu_labels(device)),
            ]
            if greatest == least:
                problems.append(f"GPU{device} has no stream priorities")
            if not preemption:
                problems.append(f"GPU{device} lacks compute preemption")
            if not pools:
                problems.append(f"GPU{device} lacks memory pools (cudaMallocAsync)")
            try:
                detail = graph_smoke_test(rt)
                figures.append(Figure(f"GPU{device} CUDA graph smoke test", detail,
                                      key="runtime_features.cuda_graph_smoke_test", labels=gpu_labels(device)))
            except CudaCallError as exc:
                return self.failed(f"GPU{device}: CUDA graph capture/replay failed: {exc}", figures=figures,
                                   remediation="Upgrade the driver; graphs need CUDA >= 10 and a working context.")
        if problems:
            return self.warned("; ".join(problems), figures=figures)
        return self.passed(f"{count} device(s): stream priorities, preemption, memory pools present; "
                           "graph capture and replay verified", figures=figures)
