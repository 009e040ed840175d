"""opgate: is this GPU operator, and the host stack that will run it, ready for production?

Heavy libraries (torch, triton, onnxruntime) are imported lazily, so `import opgate` stays cheap.
The operator-spec API (`opgate.Operator`, `opgate.TensorSpec`, `opgate.Scalar`) is loaded on first use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# torch's bundled oneMKL 2024.2 can compute a process's first erf/exp/sqrt/... on one thread with a low-accuracy
# kernel (pytorch/pytorch#188792): resolve its choice on one thread as soon as torch is imported (engine/vml_dispatch.py)
from opgate.engine import vml_dispatch as _vml_dispatch  # noqa: E402

_vml_dispatch.install()

_SPEC_API = {"Operator", "TensorSpec", "Scalar"}


def __getattr__(name: str) -> Any:
    if name in _SPEC_API:
        from opgate.core import spec

        return getattr(spec, name)
    raise AttributeError(f"module 'opgate' has no attribute {name!r}")
