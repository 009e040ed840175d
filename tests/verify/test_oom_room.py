"""The recovery trials keep most of their filler across a check's trials and free a room for the retry
(gpu/probes/oom.py Filler): every fill still ends where even 2 MiB more fails, the kept part is allocated once, and a
retry that needs more than the room runs again with everything freed, as a whole release would. A stand-in device of
a known size plays torch's allocator (the GPU test of the check runs it for real)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from opgate.gpu.probes import oom
from opgate.gpu.probes.oom import Filler, compare_beside, first_call, room_for, run_trial

GIB, MIB = 2**30, 2**20


class _OutOfMemoryError(RuntimeError):
    pass


class _Device:
    """Bytes free on a stand-in GPU; a block gives its bytes back when the last reference to it goes."""

    def __init__(self, free: int) -> None:
        self.free, self.allocations = free, 0

    def empty(self, n: int, dtype: object = None, device: object = None) -> object:
        if n > self.free:
            raise _OutOfMemoryError(f"CUDA out of memory. Tried to allocate {n} bytes")
        self.free -= n
        self.allocations += 1
        device_ = self

        class _Block:
            def numel(self) -> int:
                return n

            def __del__(self) -> None:
                device_.free += n

        return _Block()

    def torch(self) -> SimpleNamespace:
        return SimpleNamespace(empty=self.empty, uint8="uint8", cuda=SimpleNamespace(
            OutOfMemoryError=_OutOfMemoryError, mem_get_info=lambda: (self.free, 80 * GIB),
            synchronize=lambda: None, empty_cache=lambda: None))


def _needing(device: _Device, n: int):
    def fn() -> int:
        block = device.empty(n)
        del block
        return 42
    return fn


def test_the_kept_part_is_allocated_once_and_every_fill_ends_at_out_of_memory() -> None:
    device = _Device(75 * GIB)
    torch = device.torch()
    filler = Filler(room_for(100 * MIB))
    trials = [run_trial(torch, _needing(device, 100 * MIB), (), 42, index, filler) for index in range(3)]
    assert [t.oom_hit for t in trials] == [True] * 3
    assert [t.call_while_full for t in trials] == ["oom"] * 3
    assert all(t.recovered and not t.freed_all for t in trials)
    assert len(filler.kept) == 1 and filler.kept[0].numel() > 74 * GIB
    assert all(t.filled_gib > 74.9 for t in trials)
    filler.release(torch)
    assert device.free == 75 * GIB


def test_a_retry_that_needs_more_than_the_room_is_retried_with_everything_freed() -> None:
    device = _Device(75 * GIB)
    torch = device.torch()
    filler = Filler(room_for(100 * MIB))
    trial = run_trial(torch, _needing(device, 2 * GIB), (), 42, 0, filler)
    assert trial.recovered and trial.freed_all and trial.mismatch == ""
    assert not filler.kept and device.free == 75 * GIB


def test_without_a_filler_everything_is_freed_as_before() -> None:
    device = _Device(10 * GIB)
    trial = run_trial(device.torch(), _needing(device, 5 * GIB), (), 42, 0)
    assert trial.oom_hit and trial.recovered and not trial.freed_all
    assert device.free == 10 * GIB


def test_the_room_is_twice_the_peak_and_a_slack_in_whole_2_mib() -> None:
    assert room_for(0) == 256 * MIB
    assert room_for(-5) == 256 * MIB
    assert room_for(3 * MIB + 1) % (2 * MIB) == 0 and room_for(3 * MIB + 1) >= 262 * MIB


def test_the_first_call_sizes_the_room_from_its_own_peak_above_what_was_allocated_before() -> None:
    allocated = [3 * GIB]
    peak = [3 * GIB]

    def fn() -> int:
        peak[0] = allocated[0] + 100 * MIB  # the call's temporaries, freed when it returns
        return 42

    cuda = SimpleNamespace(synchronize=lambda: None, reset_peak_memory_stats=lambda: None,
                           memory_allocated=lambda: allocated[0], max_memory_allocated=lambda: peak[0])
    before, filler = first_call(SimpleNamespace(cuda=cuda), fn, ())
    assert before == 42 and filler.room_bytes == room_for(100 * MIB) and not filler.kept


def _comparing_with(device: _Device, n: int):
    """A comparison that needs `n` bytes of the device while it runs (same_answer widens floats to float64)."""
    def compare(torch: object, before: object, after: object) -> str:
        block = device.empty(n)
        del block
        return "" if before == after else "differs"
    return compare


def test_a_comparison_that_runs_out_of_memory_beside_the_kept_filler_runs_again_with_it_freed() -> None:
    # The H100 benchmark's case: the retry fitted in its room, the float64 comparison of its 256 MiB output did not.
    device = _Device(75 * GIB)
    torch = device.torch()
    filler = Filler(room_for(100 * MIB))
    run_trial(torch, _needing(device, 100 * MIB), (), 42, 0, filler)  # leaves the kept part allocated
    assert filler.kept
    assert compare_beside(torch, 42, 42, filler, _comparing_with(device, 2 * GIB)) == ""
    assert not filler.kept and device.free == 75 * GIB
    assert compare_beside(torch, 42, 41, Filler(0), _comparing_with(device, 2 * GIB)) == "differs"


def test_a_comparison_out_of_memory_with_nothing_kept_is_opgates_failure_not_a_verdict() -> None:
    device = _Device(1 * GIB)
    with pytest.raises(_OutOfMemoryError):
        compare_beside(device.torch(), 42, 42, Filler(0), _comparing_with(device, 2 * GIB))


def test_outputs_are_compared_in_slices_with_the_verdict_of_the_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(oom, "COMPARE_CHUNK", 7)
    before = torch.linspace(-3, 3, 50).reshape(5, 10)
    assert oom.same_answer(torch, before, before.clone()) == ""
    with_nan = before.clone()
    with_nan[4, 9] = float("nan")
    assert oom.same_answer(torch, with_nan, with_nan.clone()) == ""
    assert oom.same_answer(torch, before, with_nan) == "output 0 differs from the answer before the out-of-memory error"
    off = before.clone()
    off[3, 3] += 1e-3  # in the fifth slice of seven elements
    assert oom.same_answer(torch, before, off) != ""
    assert oom.same_answer(torch, before.t(), before.t().clone()) == ""  # a transposed output is compared too
    ints = torch.arange(20)
    assert oom.same_answer(torch, ints, ints.clone()) == "" and oom.same_answer(torch, ints, ints.flip(0)) != ""
    assert oom.same_answer(torch, torch.empty(0), torch.empty(0)) == ""
