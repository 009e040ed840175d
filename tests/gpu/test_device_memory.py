"""The device-memory snapshot opgate takes when a numerics case runs out of memory (opgate.gpu.probes.device_memory)."""

from __future__ import annotations

import pytest
import torch

from opgate.gpu.probes.device_memory import DeviceMemorySnapshot, ProcessMemory, device_memory_snapshot, free_cached_memory


def test_without_a_cuda_device_there_is_no_snapshot_and_freeing_is_harmless(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_memory_snapshot(torch) is None
    free_cached_memory(torch)


def test_a_snapshot_serialises_its_figures() -> None:
    snap = DeviceMemorySnapshot(0, 5, 10, 2, "torch 0.00 GiB reserved", (ProcessMemory(7, None),), "")
    assert snap.to_dict()["other_processes"] == [{"pid": 7, "used_bytes": None}]


@pytest.mark.gpu
def test_the_snapshot_counts_this_processs_allocations_and_the_cards_total() -> None:
    held = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    snap = device_memory_snapshot(torch)
    assert snap is not None and 0 < snap.free_bytes < snap.total_bytes
    assert snap.own_bytes >= held.numel() and "torch" in snap.own_detail
    del held
    free_cached_memory(torch)
    assert device_memory_snapshot(torch).own_bytes < 1 << 30  # type: ignore[union-attr]
