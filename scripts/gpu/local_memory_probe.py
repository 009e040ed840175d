"""Does a CUDA context keep the local memory of the largest per-thread stack its kernels needed, and does setting
CU_LIMIT_STACK_SIZE back release it? One process: a context, a CuPy kernel with a large local array (STACK_KIB per
thread), then opgate.gpu.thread_stack.shrink_thread_stack; the GPU's free memory (cudaMemGetInfo) and NVML's usage
of this pid after each step, as JSON lines.

    PYTHONPATH=src python3 scripts/gpu/local_memory_probe.py [STACK_KIB]
"""

from __future__ import annotations

import json
import os
import sys

import cupy
import pynvml

from opgate.gpu.thread_stack import shrink_thread_stack, stack_bytes

KIB = int(sys.argv[1]) if len(sys.argv) > 1 else 16
SOURCE = r"""
extern "C" __global__ void spill(float* out, int n) {
    volatile float buf[%d];
    for (int i = 0; i < %d; ++i) buf[i] = i * out[0];
    out[threadIdx.x] = buf[n %% %d];
}
""" % ((KIB * 256,) * 3)


def report(step: str) -> None:
    free, total = cupy.cuda.runtime.memGetInfo()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    mine = [p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid == os.getpid()]
    print(json.dumps({"step": step, "free_gib": round(free / 2**30, 2), "total_gib": round(total / 2**30, 2),
                      "nvml_this_pid_mib": (mine[0] >> 20) if mine and mine[0] else None,
                      "stack_bytes_per_thread": stack_bytes()}), flush=True)


pynvml.nvmlInit()
out = cupy.zeros(1024, dtype=cupy.float32)
cupy.cuda.runtime.deviceSynchronize()
report("context made, no kernel with local memory yet")
kernel = cupy.RawKernel(SOURCE, "spill")
kernel((1,), (128,), (out, cupy.int32(7)))
cupy.cuda.runtime.deviceSynchronize()
report(f"after one launch of a kernel with {KIB} KiB of local memory a thread")
print(json.dumps({"shrank": shrink_thread_stack()}), flush=True)
report("after shrink_thread_stack")
kernel((1,), (128,), (out, cupy.int32(7)))
cupy.cuda.runtime.deviceSynchronize()
report("after launching it again (the driver grows the stack back)")
shrink_thread_stack()
report("after shrinking again")
