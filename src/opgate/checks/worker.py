"""Child-process entry point: `python -m opgate.checks.worker REQUEST.json`.

Loads one check class, runs it, writes its result as JSON. Anything that escapes (a crash, a
hang, os._exit) is seen by the parent as a missing result or a dead process.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

from opgate.checks.base import CheckContext
from opgate.checks.registry import CheckSpec
from opgate.results import CheckResult, Outcome


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


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
            faults.append(f"cupy: {exc}".splitlines()[0])
    runtime = sys.modules.get("cuda.bindings.runtime")
    if runtime is not None:
        try:
            err, = runtime.cudaDeviceSynchronize()
            if int(err) not in (0, 35, 100):  # success, no driver, no device: nothing to poison
                faults.append(f"cuda.bindings: cudaDeviceSynchronize returned {getattr(err, 'name', err)}")
        except Exception as exc:
            faults.append(f"cuda.bindings: {exc}".splitlines()[0])
    return "; ".join(faults)


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[1]).read_text())
    result_path = Path(request["result_path"])
    ctx_data = request.get("context", {})
    ctx = CheckContext(
        verb=ctx_data.get("verb", "doctor"),
        level=ctx_data.get("level", "basic"),
        options=ctx_data.get("options", {}),
    )
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
    _write_atomically(result_path, json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
