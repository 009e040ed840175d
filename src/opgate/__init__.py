"""opgate: is this GPU operator, and the host stack that will run it, ready for production?

Heavy libraries (torch, triton, onnxruntime) are imported lazily, so `import opgate` stays cheap.
The operator-spec API (`opgate.Operator`, `opgate.TensorSpec`, `opgate.Scalar`) is loaded on first use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_SPEC_API = {"Operator", "TensorSpec", "Scalar"}


def __getattr__(name: str) -> Any:
    if name in _SPEC_API:
        from opgate.core import spec

        return getattr(spec, name)
    raise AttributeError(f"module 'opgate' has no attribute {name!r}")
