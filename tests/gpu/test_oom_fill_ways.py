"""The recovery check's fill (gpu/probes/oom.py) and the way before it, which benchmarks/oom_fill.py times beside it.
Both must end where even 2 MiB more fails, holding all but less than 2 MiB of what was free; the fill now gets there
through fewer out-of-memory errors. A stand-in device
of a known size plays torch's allocator (the benchmark itself needs a GPU)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from opgate.gpu.probes.oom import fill_until_oom

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "oom_fill.py"
GIB = 2**30


class _OutOfMemoryError(RuntimeError):
    pass


def _device(free: int, total: int = 80 * GIB) -> tuple[SimpleNamespace, list[int]]:
    """torch with a device of `total` bytes of which `free` are free; the list counts the refusals."""
    left, refused = [free], [0]

    def empty(n: int, dtype: object = None, device: object = None) -> SimpleNamespace:
        if n > left[0]:
            refused[0] += 1
            raise _OutOfMemoryError(f"CUDA out of memory. Tried to allocate {n} bytes")
        left[0] -= n
        return SimpleNamespace(numel=lambda: n)

    torch = SimpleNamespace(empty=empty, uint8="uint8",
                            cuda=SimpleNamespace(OutOfMemoryError=_OutOfMemoryError,
                                                 mem_get_info=lambda: (left[0], total)))
    return torch, refused


def _before() -> object:
    spec = importlib.util.spec_from_file_location("oom_fill_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.halving_from_a_64th


@pytest.mark.parametrize("free", [int(75.9 * GIB), 3 * GIB + 12345 * 4096, 100 * 2**20])
def test_both_fills_leave_less_than_2_mib_and_the_fill_now_refuses_fewer_times(free: int) -> None:
    now, now_refused = _device(free)
    held, hit = fill_until_oom(now)
    assert hit and free - sum(t.numel() for t in held) < 2 * 2**20
    before, before_refused = _device(free)
    held, hit = _before()(before)
    assert hit and free - sum(t.numel() for t in held) < 2 * 2**20
    assert now_refused[0] <= 6 < before_refused[0], (now_refused[0], before_refused[0])
