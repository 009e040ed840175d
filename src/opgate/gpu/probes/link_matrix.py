"""The GPU-to-GPU link matrix, measured: per ordered pair, copy-engine bandwidth and 4-byte latency (opgate.gpu.probes.p2p)
plus SM-driven peer **read** (a kernel on the destination GPU loads the source GPU's memory over peer access) and
peer **write** (a kernel on the source GPU stores into the destination's memory), each timed by events.

Judging and rendering are pure (opgate.gpu.judge.link_matrix); this module needs CuPy and two or more GPUs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from opgate.gpu.probes.bandwidth import MiB
from opgate.gpu.probes.device import ProbeError, require_gpu
from opgate.gpu.probes.p2p import P2PMeasurement, _enable_peer, measure_p2p
from opgate.gpu.probes.timing import bandwidth_gbs
from opgate.gpu.probes.timing import time_on_stream

PEER_KERNEL = "opgate_copy_u8_plain"  # grid-stride copy of 16-byte vectors (opgate.gpu.probes.kernels)
PEER_THREADS = 256
VEC_BYTES = 16


@dataclass(frozen=True)
class PairFigures:
    """One ordered pair src -> dst: data flows from src's memory to dst's memory."""

    src: int
    dst: int
    peer_access: bool
    copy_gbs: float  # cudaMemcpyPeerAsync (copy engines)
    latency_us: float  # per 4-byte peer copy, queued
    read_gbs: float | None  # kernel on dst reading src's memory; None without peer access
    write_gbs: float | None  # kernel on src writing dst's memory

    def to_dict(self) -> dict[str, Any]:
        return {"src": self.src, "dst": self.dst, "peer_access": self.peer_access, "copy_gbs": self.copy_gbs,
                "latency_us": self.latency_us, "read_gbs": self.read_gbs, "write_gbs": self.write_gbs}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PairFigures":
        return cls(int(data["src"]), int(data["dst"]), bool(data["peer_access"]), float(data["copy_gbs"]),
                   float(data["latency_us"]), data.get("read_gbs"), data.get("write_gbs"))


@dataclass(frozen=True)
class LinkMatrixMeasurement:
    devices: tuple[int, ...]
    transfer_bytes: int
    pairs: tuple[PairFigures, ...]
    p2p: P2PMeasurement
    duration_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"devices": list(self.devices), "transfer_bytes": self.transfer_bytes,
                "pairs": [p.to_dict() for p in self.pairs], "p2p": self.p2p.to_dict(), "duration_s": self.duration_s}


def measure_link_matrix(devices: list[int] | None = None, transfer_bytes: int = 128 * MiB,
                        reps: int = 5) -> LinkMatrixMeasurement:
    """Copy bandwidth and latency from `measure_p2p`, then SM peer read and write for every ordered pair."""
    import numpy as np

    started = time.perf_counter()
    p2p = measure_p2p(devices, transfer_bytes=transfer_bytes, reps=reps)
    cupy = require_gpu()
    runtime = cupy.cuda.runtime
    n = transfer_bytes - transfer_bytes % VEC_BYTES
    n_vec = np.uint64(n // VEC_BYTES)
    buffers: dict[int, Any] = {}
    pairs: list[PairFigures] = []
    try:
        for d in p2p.devices:
            with cupy.cuda.Device(d):
                buffers[d] = (cupy.full((n,), 0x10 + d % 64, dtype=cupy.uint8), cupy.empty((n,), dtype=cupy.uint8))
                cupy.cuda.Device(d).synchronize()
        for pair in p2p.pairs:
            read = write = None
            if pair.can_access_peer:
                _enable_peer(cupy, pair.dst, pair.src)  # dst's kernel reads src's memory
                _enable_peer(cupy, pair.src, pair.dst)
                read = _kernel_copy_gbs(cupy, np, runtime, pair.dst, buffers[pair.src][0], buffers[pair.dst][1], n,
                                        n_vec, reps)
                _check_bytes(cupy, pair.dst, buffers[pair.dst][1], 0x10 + pair.src % 64, f"read GPU{pair.src}->GPU{pair.dst}")
                write = _kernel_copy_gbs(cupy, np, runtime, pair.src, buffers[pair.src][0], buffers[pair.dst][1], n,
                                         n_vec, reps)
                _check_bytes(cupy, pair.dst, buffers[pair.dst][1], 0x10 + pair.src % 64, f"write GPU{pair.src}->GPU{pair.dst}")
            pairs.append(PairFigures(pair.src, pair.dst, pair.can_access_peer, pair.bandwidth_gbs, pair.latency_us,
                                     read, write))
    finally:
        buffers.clear()
        cupy.get_default_memory_pool().free_all_blocks()
    return LinkMatrixMeasurement(p2p.devices, n, tuple(pairs), p2p, time.perf_counter() - started)


def _kernel_copy_gbs(cupy: Any, np: Any, runtime: Any, on_device: int, src: Any, dst: Any, n: int, n_vec: Any,
                     reps: int) -> float:
    """GB/s of opgate's copy kernel launched on `on_device`, copying `src` to `dst` (either may be a peer's)."""
    from opgate.gpu.probes import kernels
    from opgate.gpu.probes.device import device_info

    with cupy.cuda.Device(on_device):
        sm_count = device_info(on_device).sm_count
        fn = kernels.kernel(PEER_KERNEL)
        stream = cupy.cuda.Stream(non_blocking=True)
        grid = (sm_count * 2,)
        src_ptr, dst_ptr = np.uint64(src.data.ptr), np.uint64(dst.data.ptr)
        samples = time_on_stream(cupy, stream, lambda: fn(grid, (PEER_THREADS,), (src_ptr, dst_ptr, n_vec)),
                                 warmup=2, reps=reps)
        stream.synchronize()
    return bandwidth_gbs(n, samples.median)


def _check_bytes(cupy: Any, device: int, array: Any, expected: int, what: str) -> None:
    with cupy.cuda.Device(device):
        head, tail = int(cupy.asnumpy(array[:1])[0]), int(cupy.asnumpy(array[-1:])[0])
        array.fill(0)
        cupy.cuda.Device(device).synchronize()
    if head != expected or tail != expected:
        raise ProbeError(f"peer {what} delivered wrong bytes ({head:#x}/{tail:#x}, expected {expected:#x})")
