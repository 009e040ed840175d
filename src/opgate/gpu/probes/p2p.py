"""Peer-to-peer copies between every ordered pair of GPUs: access, bandwidth and latency.

Bandwidth: cudaMemcpyPeerAsync of a large buffer, timed by events on the source GPU's stream.
Latency: many 4-byte peer copies queued behind a spin kernel (so the host's enqueue time is not in the
figure), timed by events around them: per-copy time of the copy path, not of the host.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from opgate.gpu.probes.bandwidth import MiB
from opgate.gpu.probes import kernels
from opgate.gpu.probes.device import ProbeError, require_gpu
from opgate.gpu.probes.timing import Samples, bandwidth_gbs
from opgate.gpu.probes.timing import time_on_stream

PEER_ACCESS_ALREADY_ENABLED = 704  # cudaErrorPeerAccessAlreadyEnabled (data/cuda_errors.toml)


@dataclass(frozen=True)
class PeerPair:
    src: int
    dst: int
    can_access_peer: bool
    bandwidth_gbs: float
    bandwidth_ms: Samples
    latency_us: float
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"src": self.src, "dst": self.dst, "can_access_peer": self.can_access_peer,
                "bandwidth_gbs": self.bandwidth_gbs, "bandwidth_ms": self.bandwidth_ms.summary(),
                "latency_us": self.latency_us, "note": self.note}


@dataclass(frozen=True)
class P2PMeasurement:
    devices: tuple[int, ...]
    transfer_bytes: int
    pairs: tuple[PeerPair, ...]
    duration_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"devices": list(self.devices), "transfer_bytes": self.transfer_bytes,
                "pairs": [p.to_dict() for p in self.pairs], "duration_s": self.duration_s}


def _enable_peer(cupy: Any, src: int, dst: int) -> None:
    runtime = cupy.cuda.runtime
    with cupy.cuda.Device(src):
        try:
            runtime.deviceEnablePeerAccess(dst)
        except runtime.CUDARuntimeError as exc:
            if getattr(exc, "status", None) != PEER_ACCESS_ALREADY_ENABLED:
                raise


def measure_p2p(devices: list[int] | None = None, transfer_bytes: int = 128 * MiB, reps: int = 5,
                latency_copies: int = 200) -> P2PMeasurement:
    """Every ordered pair of `devices` (all visible GPUs by default); needs at least two."""
    import numpy as np

    started = time.perf_counter()
    cupy = require_gpu()
    runtime = cupy.cuda.runtime
    if devices is None:
        devices = list(range(runtime.getDeviceCount()))
    if len(devices) < 2:
        raise ValueError("peer-to-peer needs at least two GPUs")
    n = transfer_bytes
    buffers: dict[int, Any] = {}
    small: dict[int, Any] = {}
    for d in devices:
        with cupy.cuda.Device(d):
            buffers[d] = cupy.empty((n,), dtype=cupy.uint8)
            buffers[d].fill(0x40 + d % 64)
            small[d] = cupy.empty((4096,), dtype=cupy.uint8)
            cupy.cuda.Device(d).synchronize()
    pairs: list[PeerPair] = []
    try:
        for src in devices:
            for dst in devices:
                if src == dst:
                    continue
                can = bool(runtime.deviceCanAccessPeer(src, dst))
                if can:
                    _enable_peer(cupy, src, dst)
                with cupy.cuda.Device(src):
                    stream = cupy.cuda.Stream(non_blocking=True)
                    src_ptr, dst_ptr = buffers[src].data.ptr, buffers[dst].data.ptr

                    def copy(stream: Any = stream, src: int = src, dst: int = dst, s: int = src_ptr,
                             t: int = dst_ptr) -> None:
                        runtime.memcpyPeerAsync(t, dst, s, src, n, stream.ptr)

                    samples = time_on_stream(cupy, stream, copy, warmup=2, reps=reps)
                    latency_us = _peer_latency_us(cupy, np, stream, small[src].data.ptr, src,
                                                  small[dst].data.ptr, dst, latency_copies)
                    stream.synchronize()
                expected = 0x40 + src % 64
                with cupy.cuda.Device(dst):
                    head = int(cupy.asnumpy(buffers[dst][:1])[0])
                    tail = int(cupy.asnumpy(buffers[dst][-1:])[0])
                if head != expected or tail != expected:
                    raise ProbeError(f"peer copy GPU {src} -> GPU {dst} delivered wrong bytes")
                with cupy.cuda.Device(dst):  # restore the destination's own pattern for the next pair
                    buffers[dst].fill(0x40 + dst % 64)
                    cupy.cuda.Device(dst).synchronize()
                note = "" if can else "no peer access: the driver stages these copies through host memory"
                pairs.append(PeerPair(src, dst, can, bandwidth_gbs(n, samples.median), samples, latency_us, note))
    finally:
        buffers.clear()
        small.clear()
        cupy.get_default_memory_pool().free_all_blocks()
    return P2PMeasurement(tuple(devices), n, tuple(pairs), time.perf_counter() - started)


def _peer_latency_us(cupy: Any, np: Any, stream: Any, src_ptr: int, src: int, dst_ptr: int, dst: int,
                     copies: int) -> float:
    runtime = cupy.cuda.runtime
    done = cupy.zeros(1, dtype=cupy.uint32)
    cupy.cuda.runtime.deviceSynchronize()
    spin = kernels.kernel("opgate_spin")
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    with stream:
        spin((1,), (32,), (np.uint64(3_000_000), done))  # 3 ms: the copies below queue up behind it
        start.record(stream)
        for _ in range(copies):
            runtime.memcpyPeerAsync(dst_ptr, dst, src_ptr, src, 4, stream.ptr)
        end.record(stream)
    stream.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) * 1e3 / copies
