"""opgate.engine.vml_dispatch: every process that imports opgate resolves oneMKL's VML kernel choice on one thread
as soon as torch is imported, before torch can make that first call on several threads (pytorch/pytorch#188792).

The race itself cannot be triggered on demand (about one fresh process in four here):
benchmarks/vml_first_call.py counts it with and without the warm-up, side by side."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOW = "import sys; from opgate.engine import vml_dispatch; print(vml_dispatch.resolved, 'torch' in sys.modules)"


def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}).stdout.strip()


@pytest.mark.parametrize("first", ["import opgate; import torch", "import torch; import opgate"])
def test_importing_torch_and_opgate_in_either_order_resolves_the_choice(first: str) -> None:
    pytest.importorskip("torch")
    import torch

    if not torch.backends.mkl.is_available():
        pytest.skip("this torch has no MKL: there is no VML choice to resolve")
    assert _fresh(f"{first}; {SHOW}") == "True True"


def test_importing_opgate_does_not_import_torch() -> None:
    assert _fresh(f"import opgate; {SHOW}") == "False False"


def test_a_torch_without_mkl_or_with_a_broken_function_is_left_alone() -> None:
    from types import SimpleNamespace

    from opgate.engine.vml_dispatch import resolve_vml_dispatch

    no_mkl = SimpleNamespace(backends=SimpleNamespace(mkl=SimpleNamespace(is_available=lambda: False)))
    assert resolve_vml_dispatch(no_mkl) is False  # type: ignore[arg-type]

    def broken(*_: object) -> None:
        raise RuntimeError("no kernel")

    half_built = SimpleNamespace(backends=SimpleNamespace(mkl=SimpleNamespace(is_available=lambda: True)),
                                 float32=None, float64=None, full=lambda *a, **k: 0, acos=broken)
    assert resolve_vml_dispatch(half_built) is False  # type: ignore[arg-type]
