"""Is there a GPU opgate can measure, and what is it? CuPy and NVML are imported here, lazily.

`gpu_unavailable_reason()` / `gpu_available()` is the one gate every GPU probe, check, policy and test goes
through: None when a CUDA device is usable from CuPy, else the reason in the user's terms ("no NVIDIA
driver: ..."). NVML is opened only through `opgate.probes.nvml`.
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass
from typing import Any, Iterator


class GpuUnavailable(Exception):
    """The probe cannot run here; the message is the reason shown to the user."""


class ProbeError(Exception):
    """A probe ran but its measurement is unusable (a failed self-check, a wrong copy); an opgate or
    platform problem, reported as an `error` result with this message."""


class CudaCallError(Exception):
    """A CUDA runtime call through cuda-bindings returned an error; the message names it."""


def cuda_result(result: Any) -> Any:
    """cuda-bindings returns (err, *values); the values, or CudaCallError naming err when it is not success."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise CudaCallError(f"{getattr(err, 'name', err)} ({int(err)})")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _nvml_reason() -> str | None:
    """None when NVML sees at least one NVIDIA GPU; else why not (no driver, driver not loaded, no device)."""
    from opgate.probes.nvml import NvmlUnavailable, nvml_session, query

    try:
        with nvml_session() as pynvml:
            count = query(pynvml.nvmlDeviceGetCount)
    except NvmlUnavailable as exc:
        return str(exc)
    if not isinstance(count, int):
        return f"NVML could not count GPUs: {count.reason}"
    if count == 0:
        return "no NVIDIA GPU: NVML reports 0 devices"
    return None


def import_cupy() -> Any:
    """CuPy, or GpuUnavailable naming what to install."""
    try:
        import cupy
    except ImportError as exc:
        raise GpuUnavailable(
            f"CuPy is not installed ({exc}); opgate's GPU probes compile their kernels with it: "
            "pip install cupy-cuda13x (CUDA 13 drivers) or cupy-cuda12x") from None
    except Exception as exc:  # a broken CuPy install (missing CUDA libraries) is not an opgate bug
        raise GpuUnavailable(f"CuPy could not be imported: {type(exc).__name__}: {exc}") from None
    return cupy


def _hidden_by_environment() -> str | None:
    """Why CUDA will see no device although NVML lists some, read from CUDA_VISIBLE_DEVICES alone (no context):
    CUDA takes the list up to its first entry that is not an ordinal or a GPU-/MIG- UUID, so an empty list, "-1"
    or "NoDevFiles" leaves it none. A Ray or Kubernetes node without a GPU request looks like this: NVML lists the
    host's GPUs, CUDA none (fleet run on the H200 host, 2026-12-03)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    first = value.split(",")[0].strip()
    if first.isdigit() or first.startswith(("GPU-", "MIG-")):
        return None
    return (f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU from CUDA "
            "(NVML still lists them; give this process or pod a GPU)")


@functools.lru_cache(maxsize=2)
def gpu_unavailable_reason(*, runtime: bool = True) -> str | None:
    """The one "is there a GPU" gate: None when CuPy can use at least one CUDA device here, else why not.
    `runtime=False` asks NVML and CUDA_VISIBLE_DEVICES only (cheap, no CUDA context in the calling process: the
    CLI's parent)."""
    reason = _nvml_reason() or _hidden_by_environment()
    if reason or not runtime:
        return reason
    try:
        cupy = import_cupy()
    except GpuUnavailable as exc:
        return str(exc)
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError: e.g. 100 no device (CUDA_VISIBLE_DEVICES=""), 35 old driver
        return f"CUDA cannot use the GPU: {exc}"
    if count == 0:
        return "CUDA reports 0 devices (check CUDA_VISIBLE_DEVICES)"
    return None


def gpu_available(*, runtime: bool = True) -> bool:
    return gpu_unavailable_reason(runtime=runtime) is None


def require_gpu() -> Any:
    """CuPy, once a usable device is known to exist; GpuUnavailable with the reason otherwise."""
    reason = gpu_unavailable_reason()
    if reason:
        raise GpuUnavailable(reason)
    return import_cupy()


@dataclass(frozen=True)
class DeviceInfo:
    index: int  # CUDA ordinal as this process sees it
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    l2_bytes: int
    total_memory_bytes: int
    max_threads_per_sm: int
    pci_bus_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name,
                "compute_capability": f"{self.compute_capability[0]}.{self.compute_capability[1]}",
                "sm_count": self.sm_count, "l2_bytes": self.l2_bytes,
                "total_memory_bytes": self.total_memory_bytes, "max_threads_per_sm": self.max_threads_per_sm,
                "pci_bus_id": self.pci_bus_id}


def device_count() -> int:
    cupy = require_gpu()
    return int(cupy.cuda.runtime.getDeviceCount())


def device_info(index: int) -> DeviceInfo:
    cupy = require_gpu()
    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(index)
    name = props["name"]
    if isinstance(name, bytes):
        name = name.decode(errors="replace")

    def attribute(attr: int) -> int:
        return int(runtime.deviceGetAttribute(attr, index))

    return DeviceInfo(
        index=index,
        name=str(name).strip(),
        compute_capability=(int(props["major"]), int(props["minor"])),
        sm_count=attribute(runtime.cudaDevAttrMultiProcessorCount),
        l2_bytes=attribute(runtime.cudaDevAttrL2CacheSize),
        total_memory_bytes=int(props["totalGlobalMem"]),
        max_threads_per_sm=attribute(runtime.cudaDevAttrMaxThreadsPerMultiProcessor),
        pci_bus_id=str(cupy.cuda.Device(index).pci_bus_id),
    )


def normalize_bus_id(bus_id: str) -> str:
    """'00000000:1B:00.0' (NVML) and '0000:1b:00.0' (CUDA) both become '0000:1b:00.0'."""
    text = bus_id.strip().lower()
    domain, _, rest = text.partition(":")
    if not rest:
        return text
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return text


@contextlib.contextmanager
def nvml() -> Iterator[Any]:
    """pynvml, initialised for the block (opgate.probes.nvml's session); GpuUnavailable when NVML cannot start."""
    from opgate.probes.nvml import NvmlUnavailable, nvml_session

    try:
        with nvml_session() as pynvml:
            yield pynvml
    except NvmlUnavailable as exc:
        raise GpuUnavailable(str(exc)) from None


def nvml_handle_for(pynvml: Any, pci_bus_id: str) -> Any:
    """The NVML handle of the CUDA device with this PCI bus id (NVML counts every GPU of the host,
    CUDA only the visible ones, so ordinals do not match)."""
    wanted = normalize_bus_id(pci_bus_id)
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        bus_id = pynvml.nvmlDeviceGetPciInfo(handle).busId
        if isinstance(bus_id, bytes):
            bus_id = bus_id.decode()
        if normalize_bus_id(bus_id) == wanted:
            return handle
    raise GpuUnavailable(f"NVML has no device with PCI bus id {pci_bus_id}")
