"""Runtimes an implementation can need: torch (eager), torch.compile, triton, onnxruntime, tvm.

Each backend module exposes `prepare(choice, op, dtype, workdir) -> PreparedImplementation` and runs
inside the implementation's own child process; `prepare` raises SkipCheck when the runtime is not
usable here (the reason becomes the result's reason).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from opgate.verify.backends.base import ImplementationChoice, PreparedImplementation

_MODULES = {
    "torch": "opgate.verify.backends.torch_eager",
    "torch.compile": "opgate.verify.backends.torch_compile",
    "triton": "opgate.verify.backends.triton_backend",
    "onnxruntime": "opgate.verify.backends.onnxruntime_backend",
    "tvm": "opgate.verify.backends.tvm_backend",
}


def prepare(choice: ImplementationChoice, op: Any, dtype: str, workdir: Path) -> PreparedImplementation:
    module = importlib.import_module(_MODULES[choice.backend])
    return module.prepare(choice, op, dtype, workdir)


__all__ = ["ImplementationChoice", "PreparedImplementation", "prepare"]
