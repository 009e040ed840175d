"""NVML through nvidia-ml-py. Every query goes through `query`, which returns `NotAvailable(reason)`
instead of raising, so one unsupported field never crashes a check (the nvitop `NA` habit)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator


@dataclass(frozen=True)
class NotAvailable:
    reason: str

    def __str__(self) -> str:
        return "n/a"

    def __bool__(self) -> bool:
        return False


def is_available(value: Any) -> bool:
    return not isinstance(value, NotAvailable)


class NvmlUnavailable(Exception):
    """NVML could not be initialised: no driver, or no access to the devices."""


def _decode(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def query(fn: Callable[..., Any], *args: Any) -> Any:
    import pynvml

    try:
        return _decode(fn(*args))
    except pynvml.NVMLError as exc:
        return NotAvailable(str(exc))
    except (AttributeError, TypeError) as exc:  # function missing from an older nvidia-ml-py/driver
        return NotAvailable(f"{type(exc).__name__}: {exc}")


@contextlib.contextmanager
def nvml_session() -> Iterator[Any]:
    """Initialise NVML for the block; NvmlUnavailable with a readable reason when there is no driver."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise NvmlUnavailable(f"nvidia-ml-py is not installed ({exc})") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        raise NvmlUnavailable("no NVIDIA driver: libnvidia-ml.so.1 was not found") from None
    except pynvml.NVMLError_DriverNotLoaded:
        raise NvmlUnavailable("the NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)") from None
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML could not start: {exc}") from None
    try:
        yield pynvml
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
