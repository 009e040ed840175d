"""The worker process the recovery supervisor (gpu_recovery.py beside it) drives: one JSON request per stdin
line, one JSON response per stdout line.

    {"op": "compute", "seed": 3}   a*x + y on the GPU (opgate_saxpy), checked against float64 on the host
    {"op": "poison"}               a planted kernel stores to an unmapped address (error 700); the worker
                                   reports whether the context is now unusable, then exits (code 17) if so
    {"op": "exit"}

The first line it prints is {"op": "hello", ...} once CUDA is up (or {"ok": false, ...} and exit 4).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any

STICKY_EXIT_CODE = 17
UNAVAILABLE_EXIT_CODE = 4
UNMAPPED_ADDRESS = 0x10  # the bottom page of the GPU's virtual address space is never mapped


def _cuda_code(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        return status
    from opgate.gpu.judge.cuda_errors import cuda_error_code_in

    return cuda_error_code_in(str(exc))


def _error(exc: BaseException) -> dict[str, Any]:
    from opgate.gpu.judge.cuda_errors import explain_cuda_error

    code = _cuda_code(exc)
    info = explain_cuda_error(code) if code is not None else None
    return {"error": f"{type(exc).__name__}: {exc}", "cuda_error": code,
            "cuda_error_name": info.name if info else None, "sticky": bool(info and info.sticky)}


class Worker:
    def __init__(self) -> None:
        import numpy as np

        from opgate.gpu.probes import kernels
        from opgate.gpu.probes.device import device_info, require_gpu

        self.np = np
        self.cupy = require_gpu()
        self.kernels = kernels
        self.device = device_info(0)
        self.compute(seed=0, n=1024)  # compile/load the kernels before any timing starts

    def compute(self, seed: int, n: int = 1 << 22) -> dict[str, Any]:
        np, cupy = self.np, self.cupy
        started = time.perf_counter()
        try:
            rng = np.random.default_rng(seed)
            x = rng.standard_normal(n).astype(np.float32)
            y = rng.standard_normal(n).astype(np.float32)
            a = np.float32(1.0 + (seed % 7) * 0.25)
            dx, dy = cupy.asarray(x), cupy.asarray(y)
            out = cupy.empty_like(dx)
            cupy.cuda.runtime.memset(out.data.ptr, 0xFF, out.nbytes)  # poison: every element must be written
            self.kernels.kernel("opgate_saxpy")(((n + 255) // 256,), (256,), (dx, dy, out, a, np.uint64(n)))
            cupy.cuda.runtime.deviceSynchronize()
            host = cupy.asnumpy(out)
            del dx, dy, out
        except Exception as exc:
            return {"ok": False, **_error(exc), "seconds": time.perf_counter() - started}
        reference = np.float64(a) * x.astype(np.float64) + y.astype(np.float64)
        finite = bool(np.isfinite(host).all())
        rel = float(np.linalg.norm(host.astype(np.float64) - reference) / np.linalg.norm(reference))
        correct = finite and rel < 1e-6
        return {"ok": correct, "correct": correct, "all_written": finite, "rel_error": rel, "n": n,
                "seconds": time.perf_counter() - started}

    def poison(self) -> dict[str, Any]:
        np, cupy = self.np, self.cupy
        try:
            self.kernels.kernel("opgate_illegal_store")((1,), (1,), (np.uint64(UNMAPPED_ADDRESS),))
            cupy.cuda.runtime.deviceSynchronize()
        except Exception as exc:
            fault = _error(exc)
        else:
            return {"ok": True, "faulted": False, "note": "the store to an unmapped address did not fault"}
        after = self.compute(seed=1, n=1024)
        return {"ok": False, "faulted": True, **fault, "context_usable_after": bool(after.get("ok")),
                "error_after": after.get("error"), "sticky": not after.get("ok"), "pid": os.getpid()}


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> int:
    try:
        worker = Worker()
    except Exception as exc:
        _say({"op": "hello", "ok": False, "error": f"{type(exc).__name__}: {exc}"})
        return UNAVAILABLE_EXIT_CODE
    _say({"op": "hello", "ok": True, "pid": os.getpid(), "device": worker.device.name})
    for line in sys.stdin:
        if not line.strip():
            continue
        request: Any = {}
        try:
            request = json.loads(line)
            op = request.get("op")
            if op == "compute":
                response = worker.compute(int(request.get("seed", 0)), int(request.get("n", 1 << 22)))
            elif op == "poison":
                response = worker.poison()
                _say({"op": op, **response})
                if response.get("sticky"):
                    os._exit(STICKY_EXIT_CODE)  # the context is lost: leave without running CUDA teardown
                continue
            elif op == "exit":
                _say({"op": "exit", "ok": True})
                return 0
            else:
                response = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as exc:  # a bug in the worker: report it, keep serving
            response = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        _say({"op": request.get("op") if isinstance(request, dict) else None, **response})
    return 0


if __name__ == "__main__":
    sys.exit(main())
