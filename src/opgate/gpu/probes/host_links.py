"""Host <-> GPU links: H2D and D2H copies, pinned and pageable, one direction and both at once, per GPU,
and every GPU to the host at once; judged against the PCIe generation x width NVML reports.

Pinned copies are timed with CUDA events; pageable copies with the host clock around copy + synchronize
(the driver stages them through its own pinned buffers, work the events would not see). NVML's current
link generation/width is sampled while the copies run: an idle GPU trains its link down to save power,
so the figure read at rest is not the one the copies used.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from dataclasses import dataclass, field, replace
from typing import Any

from opgate.gpu.probes.bandwidth import MiB, TimedFigure
from opgate.gpu.probes.device import (DeviceInfo, GpuUnavailable, ProbeError, device_info, nvml, nvml_handle_for,
                                      require_gpu)
from opgate.gpu.probes.pcie import UnknownPcieGeneration, payload_ceiling_fraction, pcie_theoretical_gbs
from opgate.gpu.probes.pcie_config import ExpressFacts, PcieConfigError, read_express_facts
from opgate.gpu.probes.polling import Poller
from opgate.gpu.probes.timing import Samples, bandwidth_gbs
from opgate.gpu.probes.timing import time_host_ms, time_on_stream

DEFAULT_TRANSFER_BYTES = 256 * MiB


@dataclass(frozen=True)
class PcieLink:
    """What NVML says about one GPU's PCIe link; `under_load_*` was sampled during the copies."""

    max_generation: int | None
    max_width: int | None
    idle_generation: int | None
    idle_width: int | None
    under_load_generation: int | None
    under_load_width: int | None
    samples: int
    note: str = ""
    # The GPU's PCI Express capability (payload size and link as the device sees them), or why it cannot tell.
    express: ExpressFacts | None = None
    express_error: str = ""

    def theoretical_gbs(self) -> float | None:
        """Per direction, for the link as it ran during the copies (else as NVML reports it now)."""
        gen = self.under_load_generation or self.idle_generation
        width = self.under_load_width or self.idle_width
        if not gen or not width:
            return None
        try:
            return pcie_theoretical_gbs(gen, width)
        except (UnknownPcieGeneration, ValueError):
            return None

    def max_theoretical_gbs(self) -> float | None:
        if not self.max_generation or not self.max_width:
            return None
        try:
            return pcie_theoretical_gbs(self.max_generation, self.max_width)
        except (UnknownPcieGeneration, ValueError):
            return None

    def to_dict(self) -> dict[str, Any]:
        return {"max_generation": self.max_generation, "max_width": self.max_width,
                "idle_generation": self.idle_generation, "idle_width": self.idle_width,
                "under_load_generation": self.under_load_generation, "under_load_width": self.under_load_width,
                "samples": self.samples, "theoretical_gbs": self.theoretical_gbs(),
                "max_theoretical_gbs": self.max_theoretical_gbs(), "note": self.note,
                "express": self.express.to_dict() if self.express else None, "express_error": self.express_error}

    def payload_ceiling_gbs(self, direction: str) -> float | None:
        """The most a one-way copy can carry as data in full TLPs of the link's max payload (an upper bound)."""
        theoretical = self.theoretical_gbs()
        gen = self.under_load_generation or self.idle_generation
        if theoretical is None or gen is None or self.express is None:
            return None
        fraction = payload_ceiling_fraction(gen, self.express.max_payload_bytes, direction)
        return None if fraction is None else theoretical * fraction


class _LinkSampler:
    """Polls NVML's current PCIe generation and width while copies run; keeps the highest."""

    def __init__(self, pynvml: Any, handle: Any, interval_s: float = 0.002) -> None:
        self._pynvml, self._handle = pynvml, handle
        self.generation: int | None = None
        self.width: int | None = None
        self.samples = 0
        self.error = ""
        self.poller = Poller(self._poll, interval_s, "opgate-pcie-sampler")

    def _poll(self) -> bool:
        try:
            gen = int(self._pynvml.nvmlDeviceGetCurrPcieLinkGeneration(self._handle))
            width = int(self._pynvml.nvmlDeviceGetCurrPcieLinkWidth(self._handle))
        except Exception as exc:  # NVMLError_NotSupported in some VMs: keep the reason, stop polling
            self.error = f"{type(exc).__name__}: {exc}"
            return False
        self.generation = max(self.generation or 0, gen)
        self.width = max(self.width or 0, width)
        self.samples += 1
        return True


def _nvml_int(pynvml: Any, fn_name: str, handle: Any) -> int | None:
    fn = getattr(pynvml, fn_name, None)
    if fn is None:
        return None
    try:
        return int(fn(handle))
    except Exception:
        return None


@dataclass(frozen=True)
class BidirectionalFigure:
    bytes_each_way: int
    total_ms: Samples  # from the common start until both directions finished
    h2d_ms: Samples
    d2h_ms: Samples

    @property
    def aggregate_gbs(self) -> float:
        return bandwidth_gbs(2 * self.bytes_each_way, self.total_ms.median)

    @property
    def h2d_gbs(self) -> float:
        return bandwidth_gbs(self.bytes_each_way, self.h2d_ms.median)

    @property
    def d2h_gbs(self) -> float:
        return bandwidth_gbs(self.bytes_each_way, self.d2h_ms.median)

    def to_dict(self) -> dict[str, Any]:
        return {"bytes_each_way": self.bytes_each_way, "aggregate_gbs": self.aggregate_gbs,
                "h2d_gbs": self.h2d_gbs, "d2h_gbs": self.d2h_gbs, "total_ms": self.total_ms.summary()}


@dataclass(frozen=True)
class HostLinkMeasurement:
    device: DeviceInfo
    transfer_bytes: int
    h2d_pinned: TimedFigure
    d2h_pinned: TimedFigure
    h2d_pageable: TimedFigure
    d2h_pageable: TimedFigure
    bidirectional_pinned: BidirectionalFigure
    link: PcieLink | None
    link_error: str
    duration_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device.to_dict(), "transfer_bytes": self.transfer_bytes,
                "h2d_pinned": self.h2d_pinned.to_dict(), "d2h_pinned": self.d2h_pinned.to_dict(),
                "h2d_pageable": self.h2d_pageable.to_dict(), "d2h_pageable": self.d2h_pageable.to_dict(),
                "bidirectional_pinned": self.bidirectional_pinned.to_dict(),
                "link": self.link.to_dict() if self.link else None, "link_error": self.link_error,
                "duration_s": self.duration_s}


def _host_view(ptr: int, nbytes: int) -> Any:
    import numpy as np

    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr))


def _pinned(cupy: Any, nbytes: int) -> tuple[int, Any]:
    """Portable pinned host memory (pinned for every device's context), filled with a non-zero pattern."""
    runtime = cupy.cuda.runtime
    ptr = int(runtime.hostAlloc(nbytes, runtime.hostAllocPortable))
    view = _host_view(ptr, nbytes)
    view.fill(0xA5)
    return ptr, view


def _open_link(info: DeviceInfo, session: contextlib.ExitStack) -> tuple[Any, Any, PcieLink | None, str]:
    """(pynvml, initialised until `session` closes; handle; link facts at rest) or the reason NVML cannot tell."""
    try:
        pynvml = session.enter_context(nvml())
    except GpuUnavailable as exc:
        return None, None, None, str(exc)
    try:
        handle = nvml_handle_for(pynvml, info.pci_bus_id)
    except Exception as exc:
        session.close()
        return None, None, None, str(exc)
    link = PcieLink(
        max_generation=_nvml_int(pynvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
        max_width=_nvml_int(pynvml, "nvmlDeviceGetMaxPcieLinkWidth", handle),
        idle_generation=_nvml_int(pynvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        idle_width=_nvml_int(pynvml, "nvmlDeviceGetCurrPcieLinkWidth", handle),
        under_load_generation=None, under_load_width=None, samples=0)
    try:
        link = replace(link, express=read_express_facts(info.pci_bus_id))
    except PcieConfigError as exc:
        link = replace(link, express_error=str(exc))
    return pynvml, handle, link, ""


def measure_host_links(device: int = 0, transfer_bytes: int = DEFAULT_TRANSFER_BYTES,
                       reps: int = 20, pageable_reps: int = 3) -> HostLinkMeasurement:
    import numpy as np

    started = time.perf_counter()
    cupy = require_gpu()
    info = device_info(device)
    runtime = cupy.cuda.runtime
    n = transfer_bytes
    nvml_open = contextlib.ExitStack()
    pynvml, handle, link, link_error = _open_link(info, nvml_open)
    sampler: _LinkSampler | None = None
    host_ptrs: list[int] = []
    try:
        with cupy.cuda.Device(device):
            s1 = cupy.cuda.Stream(non_blocking=True)
            s2 = cupy.cuda.Stream(non_blocking=True)
            dev_a = cupy.empty((n,), dtype=cupy.uint8)
            dev_b = cupy.empty((n,), dtype=cupy.uint8)
            dev_b.fill(0x3C)
            cupy.cuda.Device(device).synchronize()  # fill ran on the legacy stream; s1/s2 do not wait for it
            host_src, _ = _pinned(cupy, n)
            host_ptrs.append(host_src)
            host_dst, _ = _pinned(cupy, n)
            host_ptrs.append(host_dst)
            if pynvml is not None:
                sampler = _LinkSampler(pynvml, handle)
                sampler.poller.start()

            def h2d(stream: Any = s1) -> None:
                runtime.memcpyAsync(dev_a.data.ptr, host_src, n, runtime.memcpyHostToDevice, stream.ptr)

            def d2h(stream: Any = s1) -> None:
                runtime.memcpyAsync(host_dst, dev_b.data.ptr, n, runtime.memcpyDeviceToHost, stream.ptr)

            h2d_pinned = TimedFigure("H2D pinned", n, time_on_stream(cupy, s1, h2d, warmup=2, reps=reps),
                                     "cudaMemcpyAsync, portable pinned host memory")
            d2h_pinned = TimedFigure("D2H pinned", n, time_on_stream(cupy, s1, d2h, warmup=2, reps=reps),
                                     "cudaMemcpyAsync, portable pinned host memory")
            bidir = _bidirectional(cupy, s1, s2, h2d, d2h, n, reps)
            if sampler is not None:
                sampler.poller.stop()
            if int(_host_view(host_dst, n)[0]) != 0x3C or int(_host_view(host_dst, n)[-1]) != 0x3C:
                raise ProbeError("pinned D2H copy delivered wrong bytes: the host-link figures would be meaningless")

            pageable_src = np.empty(n, dtype=np.uint8)
            pageable_src.fill(0x5A)  # touch every page before timing
            pageable_dst = np.empty(n, dtype=np.uint8)
            pageable_dst.fill(0x00)

            def h2d_pageable() -> None:
                runtime.memcpyAsync(dev_a.data.ptr, pageable_src.ctypes.data, n, runtime.memcpyHostToDevice, s1.ptr)
                s1.synchronize()

            def d2h_pageable() -> None:
                runtime.memcpyAsync(pageable_dst.ctypes.data, dev_b.data.ptr, n, runtime.memcpyDeviceToHost, s1.ptr)
                s1.synchronize()

            h2d_pg = TimedFigure("H2D pageable", n, time_host_ms(h2d_pageable, warmup=1, reps=pageable_reps),
                                 "cudaMemcpyAsync + synchronize, host clock")
            d2h_pg = TimedFigure("D2H pageable", n, time_host_ms(d2h_pageable, warmup=1, reps=pageable_reps),
                                 "cudaMemcpyAsync + synchronize, host clock")
            if int(pageable_dst[0]) != 0x3C or int(pageable_dst[-1]) != 0x3C:
                raise ProbeError("D2H copy delivered wrong bytes: the host-link figures would be meaningless")
            dev_a = dev_b = None  # drop the last references before emptying the pool
            cupy.get_default_memory_pool().free_all_blocks()
    finally:
        if sampler is not None:
            sampler.poller.stop()
        for ptr in host_ptrs:
            cupy.cuda.runtime.freeHost(ptr)
        nvml_open.close()
    if link is not None and sampler is not None:
        link = replace(link, under_load_generation=sampler.generation, under_load_width=sampler.width,
                       samples=sampler.samples, note=sampler.error)
    return HostLinkMeasurement(info, n, h2d_pinned, d2h_pinned, h2d_pg, d2h_pg, bidir, link, link_error,
                               time.perf_counter() - started)


def _bidirectional(cupy: Any, s1: Any, s2: Any, h2d: Any, d2h: Any, n: int, reps: int) -> BidirectionalFigure:
    """H2D on one stream and D2H on another, both released by one start event."""
    totals, ups, downs = [], [], []
    for rep in range(reps + 2):
        start, end_up, end_down = cupy.cuda.Event(), cupy.cuda.Event(), cupy.cuda.Event()
        start.record(s1)
        s2.wait_event(start)
        h2d(s1)
        d2h(s2)
        end_up.record(s1)
        end_down.record(s2)
        s1.synchronize()
        s2.synchronize()
        if rep < 2:  # warm-up
            continue
        up = cupy.cuda.get_elapsed_time(start, end_up)
        down = cupy.cuda.get_elapsed_time(start, end_down)
        ups.append(up)
        downs.append(down)
        totals.append(max(up, down))
    return BidirectionalFigure(n, Samples.of(totals), Samples.of(ups), Samples.of(downs))


@dataclass(frozen=True)
class ContentionMeasurement:
    """Every GPU copying to (or from) the host at the same time."""

    direction: str  # "H2D" or "D2H"
    transfer_bytes: int
    repeats: int
    per_gpu_gbs: dict[int, float]  # concurrent, each GPU timed by its own events
    aggregate_gbs: float  # all bytes over the host wall time
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"direction": self.direction, "transfer_bytes": self.transfer_bytes, "repeats": self.repeats,
                "per_gpu_gbs": {str(k): v for k, v in self.per_gpu_gbs.items()},
                "aggregate_gbs": self.aggregate_gbs, **self.extra}


def measure_all_to_host(devices: list[int], direction: str = "D2H",
                        transfer_bytes: int = DEFAULT_TRANSFER_BYTES, repeats: int = 4) -> ContentionMeasurement:
    """All `devices` copy at once; per-GPU GB/s from each GPU's events, aggregate from the host clock."""
    if direction not in ("H2D", "D2H"):
        raise ValueError(f"direction must be H2D or D2H, not {direction!r}")
    cupy = require_gpu()
    runtime = cupy.cuda.runtime
    n = transfer_bytes
    state: list[dict[str, Any]] = []
    try:
        for d in devices:
            with cupy.cuda.Device(d):
                entry = {"device": d, "stream": cupy.cuda.Stream(non_blocking=True),
                         "dev": cupy.empty((n,), dtype=cupy.uint8), "start": cupy.cuda.Event(),
                         "end": cupy.cuda.Event()}
                entry["dev"].fill(0x3C)
                entry["host"], _ = _pinned(cupy, n)
                state.append(entry)
        for d in devices:
            cupy.cuda.Device(d).synchronize()

        def issue(entry: dict[str, Any]) -> None:
            stream = entry["stream"]
            if direction == "H2D":
                runtime.memcpyAsync(entry["dev"].data.ptr, entry["host"], n, runtime.memcpyHostToDevice, stream.ptr)
            else:
                runtime.memcpyAsync(entry["host"], entry["dev"].data.ptr, n, runtime.memcpyDeviceToHost, stream.ptr)

        for entry in state:  # warm-up, each GPU alone
            with cupy.cuda.Device(entry["device"]):
                issue(entry)
                entry["stream"].synchronize()
        wall_start = time.perf_counter()
        for entry in state:
            with cupy.cuda.Device(entry["device"]):
                entry["start"].record(entry["stream"])
                for _ in range(repeats):
                    issue(entry)
                entry["end"].record(entry["stream"])
        for entry in state:
            with cupy.cuda.Device(entry["device"]):
                entry["stream"].synchronize()
        wall_ms = (time.perf_counter() - wall_start) * 1e3
        per_gpu = {}
        for entry in state:
            with cupy.cuda.Device(entry["device"]):
                ms = cupy.cuda.get_elapsed_time(entry["start"], entry["end"])
            per_gpu[entry["device"]] = bandwidth_gbs(n * repeats, ms)
        aggregate = bandwidth_gbs(n * repeats * len(devices), wall_ms)
    finally:
        for entry in state:
            if "host" in entry:
                runtime.freeHost(entry["host"])
            entry.pop("dev", None)
        cupy.get_default_memory_pool().free_all_blocks()
    return ContentionMeasurement(direction, n, repeats, per_gpu, aggregate)
