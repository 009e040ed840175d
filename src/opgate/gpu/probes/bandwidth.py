"""Device memory bandwidth: HBM read stream, device-to-device copies, and L2.

Every figure is measured here with CUDA events around opgate's own kernels (kernels.py), cudaMemcpy, and
PyTorch's `dst.copy_(src)` when torch is installed; medians of repeated runs after warm-up. Copies count
bytes read plus bytes written. The HBM buffer is gigabytes, many times the L2, so no repetition is served
from cache; the L2 working set is a quarter of the L2 size the device reports.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from opgate.gpu.probes import kernels
from opgate.gpu.probes.clocks import ClockSampler, ClockWindow
from opgate.gpu.probes.device import DeviceInfo, GpuUnavailable, ProbeError, device_info, require_gpu
from opgate.gpu.probes.timing import Samples, bandwidth_tbs
from opgate.gpu.probes.timing import time_interleaved, time_on_stream

GiB = 1 << 30
MiB = 1 << 20
DEFAULT_HBM_BUFFER_BYTES = 4 * GiB
THREADS = 256
VEC_BYTES = 16


@dataclass(frozen=True)
class TimedFigure:
    """One bandwidth figure: bytes per run, the timing samples (ms) and what ran."""

    label: str
    bytes_per_run: int
    samples_ms: Samples
    config: str = ""

    @property
    def tbs(self) -> float:
        return bandwidth_tbs(self.bytes_per_run, self.samples_ms.median)

    @property
    def gbs(self) -> float:
        return self.tbs * 1000.0

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "bytes_per_run": self.bytes_per_run, "tbs": self.tbs, "gbs": self.gbs,
                "config": self.config, "ms": self.samples_ms.summary(),
                "relative_spread": self.samples_ms.relative_spread}


@dataclass(frozen=True)
class HbmMeasurement:
    device: DeviceInfo
    buffer_bytes: int
    read: TimedFigure
    copy_kernel: TimedFigure | None
    memcpy: TimedFigure | None
    torch_copy: TimedFigure | None
    torch_note: str
    tuning: tuple[tuple[str, float], ...]  # (config, TB/s) of every variant tried
    duration_s: float
    read_clocks: ClockWindow | None = None  # NVML's clocks, temperature and slowdowns during the read stream
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device.to_dict(), "buffer_bytes": self.buffer_bytes,
                "read": self.read.to_dict(),
                "copy_kernel": self.copy_kernel.to_dict() if self.copy_kernel else None,
                "memcpy": self.memcpy.to_dict() if self.memcpy else None,
                "torch_copy": self.torch_copy.to_dict() if self.torch_copy else None,
                "torch_note": self.torch_note, "tuning": [list(t) for t in self.tuning],
                "duration_s": self.duration_s,
                "read_clocks": self.read_clocks.to_dict() if self.read_clocks else None, **self.extra}


@dataclass(frozen=True)
class L2Measurement:
    device: DeviceInfo
    working_set_bytes: int
    passes: int
    l2_read: TimedFigure
    hbm_read: TimedFigure
    duration_s: float

    @property
    def hbm_over_l2(self) -> float:
        return self.hbm_read.tbs / self.l2_read.tbs

    @property
    def l2_over_hbm(self) -> float:
        return self.l2_read.tbs / self.hbm_read.tbs

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device.to_dict(), "working_set_bytes": self.working_set_bytes,
                "passes": self.passes, "l2_read": self.l2_read.to_dict(), "hbm_read": self.hbm_read.to_dict(),
                "hbm_over_l2": self.hbm_over_l2, "duration_s": self.duration_s}


def _blocks_per_sm_options(info: DeviceInfo) -> tuple[int, ...]:
    full = max(1, info.max_threads_per_sm // THREADS)
    return tuple(sorted({max(1, full // 4), max(1, full // 2), full}))


def _seed() -> int:
    return (int.from_bytes(os.urandom(4), "little") | 1) & 0xFFFFFFFF


def _fill(cupy: Any, np: Any, info: DeviceInfo, ptr_or_array: Any, n_vec: int, stream: Any) -> None:
    with stream:
        kernels.kernel("opgate_fill")((info.sm_count * 8,), (THREADS,),
                                      (ptr_or_array, np.uint64(n_vec), np.uint32(_seed())))
    stream.synchronize()


def _hbm_buffer_bytes(cupy: Any, info: DeviceInfo, requested: int | None) -> int:
    free, _total = cupy.cuda.runtime.memGetInfo()
    wanted = requested or DEFAULT_HBM_BUFFER_BYTES
    nbytes = min(wanted, int(free * 0.4))
    nbytes -= nbytes % (2 * MiB)
    floor = max(16 * info.l2_bytes, 256 * MiB)
    if nbytes < floor:
        raise ProbeError(f"only {free / GiB:.1f} GiB free on GPU {info.index}: an HBM measurement needs a "
                         f"buffer of at least {floor / GiB:.2f} GiB (16x the L2) to keep the cache out of it")
    return nbytes


def measure_hbm_read_only(cupy: Any, np: Any, info: DeviceInfo, buffer: Any, nbytes: int, stream: Any,
                          reps: int, tune: bool = True) -> tuple[TimedFigure, list[tuple[str, float]]]:
    """Best read-stream figure over the kernel variants (loads in flight x occupancy)."""
    n_vec = nbytes // VEC_BYTES
    sink = cupy.zeros(1, dtype=cupy.uint32)
    cupy.cuda.Device(info.index).synchronize()
    magic = np.uint32(_seed())
    variants = [(u, b) for u in kernels.READ_UNROLLS for b in _blocks_per_sm_options(info)] if tune else \
        [(kernels.READ_UNROLLS[0], _blocks_per_sm_options(info)[-1])]
    tuning: list[tuple[str, float]] = []
    best: tuple[float, int, int] | None = None
    for unroll, bps in variants:
        fn = kernels.kernel(kernels.read_kernel_name(unroll))
        grid = (info.sm_count * bps,)

        def launch(fn: Any = fn, grid: tuple[int] = grid) -> None:
            fn(grid, (THREADS,), (buffer, np.uint64(n_vec), magic, sink))

        samples = time_on_stream(cupy, stream, launch, warmup=2, reps=5)
        tbs = bandwidth_tbs(nbytes, samples.median)
        tuning.append((f"read unroll={unroll} blocks/SM={bps} threads={THREADS}", tbs))
        if best is None or tbs > best[0]:
            best = (tbs, unroll, bps)
    assert best is not None
    _, unroll, bps = best
    fn = kernels.kernel(kernels.read_kernel_name(unroll))
    grid = (info.sm_count * bps,)
    samples = time_on_stream(cupy, stream, lambda: fn(grid, (THREADS,), (buffer, np.uint64(n_vec), magic, sink)),
                             warmup=3, reps=reps)
    return (TimedFigure("HBM read (opgate kernel)", nbytes, samples,
                        f"read unroll={unroll} blocks/SM={bps} threads={THREADS}"), tuning)


def _verify_copy(cupy: Any, buffer: Any, half: int) -> None:
    """The copy kernel must have copied: compare 16 windows of the two halves on the host."""
    import numpy as np

    window = 64 * 1024
    rng = np.random.default_rng()
    for offset in [0, half - window, *rng.integers(0, half - window, size=14).tolist()]:
        offset -= offset % VEC_BYTES
        src = cupy.asnumpy(buffer[offset:offset + window])
        dst = cupy.asnumpy(buffer[half + offset:half + offset + window])
        if not np.array_equal(src, dst):
            raise ProbeError(f"opgate's copy kernel wrote wrong data at byte offset {offset}: "
                             "the bandwidth figure would be meaningless")


def _torch_copy(device_index: int, nbytes: int, reps: int) -> tuple[TimedFigure | None, str]:
    """PyTorch's plain equivalent, `dst.copy_(src)` (opgate.gpu.probes.torch_equivalents), or why it was not measured.
    A copy that delivered wrong bytes raises ProbeError."""
    try:
        from opgate.gpu.probes.torch_equivalents import device_copy

        figure = device_copy(device_index, nbytes, reps)
    except ImportError as exc:
        return None, f"PyTorch not installed ({exc})"
    except GpuUnavailable as exc:
        return None, str(exc)
    return TimedFigure("PyTorch dst.copy_(src)", 2 * nbytes, figure.samples, figure.what), ""


def measure_hbm(device: int = 0, buffer_bytes: int | None = None, reps: int = 20,
                include_copy: bool = True, include_torch: bool = True) -> HbmMeasurement:
    """HBM read stream, opgate's copy kernel vs cudaMemcpy D2D (interleaved), and PyTorch's copy."""
    import numpy as np

    started = time.perf_counter()
    cupy = require_gpu()
    info = device_info(device)
    with cupy.cuda.Device(device):
        nbytes = _hbm_buffer_bytes(cupy, info, buffer_bytes)
        stream = cupy.cuda.Stream(non_blocking=True)
        buffer = cupy.empty((nbytes,), dtype=cupy.uint8)
        try:
            _fill(cupy, np, info, buffer, nbytes // VEC_BYTES, stream)
            with ClockSampler(info.pci_bus_id) as clocks:
                read, tuning = measure_hbm_read_only(cupy, np, info, buffer, nbytes, stream, reps)
            copy_fig = memcpy_fig = None
            if include_copy:
                copy_fig, memcpy_fig, copy_tuning = _measure_copies(cupy, np, info, buffer, nbytes, stream, reps)
                tuning.extend(copy_tuning)
        finally:
            buffer = None  # drop the last reference before emptying the pool
            cupy.get_default_memory_pool().free_all_blocks()
        torch_fig, torch_note = (None, "not requested")
        if include_copy and include_torch:
            torch_fig, torch_note = _torch_copy(device, nbytes // 2, reps)
    return HbmMeasurement(info, nbytes, read, copy_fig, memcpy_fig, torch_fig, torch_note, tuple(tuning),
                          time.perf_counter() - started, clocks.window())


def _measure_copies(cupy: Any, np: Any, info: DeviceInfo, buffer: Any, nbytes: int, stream: Any,
                    reps: int) -> tuple[TimedFigure, TimedFigure, list[tuple[str, float]]]:
    half = nbytes // 2
    half -= half % (2 * MiB)
    n_vec = half // VEC_BYTES
    src_ptr = np.uint64(buffer.data.ptr)
    dst_ptr = np.uint64(buffer.data.ptr + half)
    runtime = cupy.cuda.runtime
    copied = 2 * half  # bytes read + bytes written

    def copy_launcher(config: kernels.CopyConfig) -> Any:
        fn = kernels.kernel(config.kernel_name)
        grid = (config.grid(info.sm_count, n_vec),)
        return lambda: fn(grid, (config.threads,), (src_ptr, dst_ptr, np.uint64(n_vec)))

    # Correctness first: one copy, then compare the halves (the fill pattern differs between them).
    with stream:
        copy_launcher(kernels.COPY_CONFIGS[0])()
    stream.synchronize()
    _verify_copy(cupy, buffer, half)

    tuning: list[tuple[str, float]] = []
    best: tuple[float, kernels.CopyConfig] | None = None
    for config in kernels.COPY_CONFIGS:
        samples = time_on_stream(cupy, stream, copy_launcher(config), warmup=2, reps=5)
        tbs = bandwidth_tbs(copied, samples.median)
        tuning.append((config.describe(), tbs))
        if best is None or tbs > best[0]:
            best = (tbs, config)
    assert best is not None
    winner = best[1]
    with stream:  # the winner must copy correctly too: clear the destination, copy, compare
        buffer[half:2 * half].fill(0)
        copy_launcher(winner)()
    stream.synchronize()
    _verify_copy(cupy, buffer, half)

    def memcpy() -> None:
        runtime.memcpyAsync(int(dst_ptr), int(src_ptr), half, runtime.memcpyDeviceToDevice, stream.ptr)

    copy_samples, memcpy_samples = time_interleaved(
        cupy, stream, [copy_launcher(winner), memcpy], warmup=3, reps=reps)
    return (TimedFigure("D2D copy (opgate kernel)", copied, copy_samples, winner.describe()),
            TimedFigure("cudaMemcpy D2D", copied, memcpy_samples, "cudaMemcpyAsync DeviceToDevice"),
            tuning)


def measure_l2(device: int = 0, reps: int = 15, target_bytes_per_run: float = 8e9) -> L2Measurement:
    """Read bandwidth of a working set a quarter of the L2, beside HBM read measured the same way."""
    import numpy as np

    started = time.perf_counter()
    cupy = require_gpu()
    info = device_info(device)
    if info.l2_bytes <= 0:
        raise ProbeError(f"GPU {device} reports an L2 size of {info.l2_bytes} bytes")
    working_set = max(MiB, info.l2_bytes // 4)
    working_set -= working_set % 4096
    n_vec = working_set // VEC_BYTES
    passes = max(1, math.ceil(target_bytes_per_run / working_set))
    with cupy.cuda.Device(device):
        stream = cupy.cuda.Stream(non_blocking=True)
        hbm_bytes = _hbm_buffer_bytes(cupy, info, max(GiB, 32 * info.l2_bytes))
        buffer = cupy.empty((max(hbm_bytes, working_set),), dtype=cupy.uint8)
        try:
            _fill(cupy, np, info, buffer, buffer.size // VEC_BYTES, stream)
            sink = cupy.zeros(1, dtype=cupy.uint32)
            cupy.cuda.Device(device).synchronize()
            magic = np.uint32(_seed())
            fn = kernels.kernel("opgate_l2_read")
            best: TimedFigure | None = None
            for bps in _blocks_per_sm_options(info):
                grid = (info.sm_count * bps,)
                samples = time_on_stream(
                    cupy, stream,
                    lambda grid=grid: fn(grid, (THREADS,), (buffer, np.uint64(n_vec), np.int32(passes), magic, sink)),
                    warmup=3, reps=reps)
                figure = TimedFigure("L2 read (opgate kernel)", working_set * passes, samples,
                                     f"working set {working_set / MiB:.1f} MiB x {passes} passes, blocks/SM={bps}")
                if best is None or figure.tbs > best.tbs:
                    best = figure
            assert best is not None
            hbm, _ = measure_hbm_read_only(cupy, np, info, buffer, hbm_bytes, stream, reps=reps, tune=True)
        finally:
            buffer = None  # drop the last reference before emptying the pool
            cupy.get_default_memory_pool().free_all_blocks()
    return L2Measurement(info, working_set, passes, best, hbm, time.perf_counter() - started)
