"""What the GPU's clocks, temperature, power and clock-event reasons were while a probe ran, from NVML.

A bandwidth figure below its reference is only actionable with this beside it: a memory clock under its
maximum, a thermal or power slowdown, or none of these (then the memory itself, or the probe, is slower).
NVML is polled while the probe runs (opgate.gpu.probes.polling); these are the extremes seen in the probe's window.
Reasons are decoded from pynvml's own `nvmlClocksEventReason*` constants, so no bit value is copied here.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from opgate.gpu.probes.polling import Poller

# Clock-event reasons that mean the GPU was held back; the others (GpuIdle, ApplicationsClocksSetting, ...)
# describe a setting or an idle moment between kernels, not a slowdown.
SLOWDOWN_REASONS = frozenset({"SwPowerCap", "HwSlowdown", "SwThermalSlowdown", "HwThermalSlowdown",
                              "HwPowerBrakeSlowdown"})


@dataclass(frozen=True)
class ClockWindow:
    """NVML readings over one probe window (extremes over `samples` polls)."""

    samples: int
    sm_mhz_min: int | None
    sm_mhz_max: int | None
    memory_mhz_min: int | None
    memory_mhz_max: int | None
    max_sm_mhz: int | None  # the clocks the board can reach
    max_memory_mhz: int | None
    temperature_c_max: int | None
    power_w_max: float | None
    reasons: tuple[str, ...] = field(default_factory=tuple)  # clock-event reasons seen at any poll
    error: str = ""  # why NVML could not be read (then every figure is None)

    @property
    def slowdowns(self) -> tuple[str, ...]:
        return tuple(r for r in self.reasons if r in SLOWDOWN_REASONS)

    @property
    def memory_clock_fraction(self) -> float | None:
        """The lowest memory clock seen, as a fraction of the board's maximum."""
        if self.memory_mhz_min is None or not self.max_memory_mhz:
            return None
        return self.memory_mhz_min / self.max_memory_mhz

    def summary(self) -> str:
        if self.error:
            return f"clocks not read ({self.error})"
        parts = []
        if self.memory_mhz_min is not None:
            parts.append(f"memory clock {self.memory_mhz_min}-{self.memory_mhz_max} of {self.max_memory_mhz} MHz")
        if self.sm_mhz_min is not None:
            parts.append(f"SM clock {self.sm_mhz_min}-{self.sm_mhz_max} of {self.max_sm_mhz} MHz")
        if self.temperature_c_max is not None:
            parts.append(f"up to {self.temperature_c_max} C")
        if self.power_w_max is not None:
            parts.append(f"up to {self.power_w_max:.0f} W")
        parts.append("slowdowns: " + (", ".join(self.slowdowns) if self.slowdowns else "none"))
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "sm_mhz_min": self.sm_mhz_min, "sm_mhz_max": self.sm_mhz_max,
                "memory_mhz_min": self.memory_mhz_min, "memory_mhz_max": self.memory_mhz_max,
                "max_sm_mhz": self.max_sm_mhz, "max_memory_mhz": self.max_memory_mhz,
                "temperature_c_max": self.temperature_c_max, "power_w_max": self.power_w_max,
                "reasons": list(self.reasons), "slowdowns": list(self.slowdowns), "error": self.error}


def decode_reasons(pynvml: Any, mask: int) -> tuple[str, ...]:
    """Names of the clock-event reason bits set in `mask`, from pynvml's constants (newer name first)."""
    names: dict[int, str] = {}
    for prefix in ("nvmlClocksThrottleReason", "nvmlClocksEventReason"):  # the later prefix wins a shared bit
        for attr in dir(pynvml):
            if attr.startswith(prefix) and attr[len(prefix):] not in ("All", "None"):
                value = getattr(pynvml, attr)
                if isinstance(value, int) and value and value & (value - 1) == 0:
                    names[value] = attr[len(prefix):]
    return tuple(name for bit, name in sorted(names.items()) if mask & bit)


def _minmax(values: list[int]) -> tuple[int | None, int | None]:
    return (min(values), max(values)) if values else (None, None)


class ClockSampler:
    """Polls NVML between entering and leaving the block; use as a context manager around a probe.
    Never raises: when NVML cannot be read, the window carries the reason instead of figures."""

    def __init__(self, pci_bus_id: str, interval_s: float = 0.01) -> None:
        self.pci_bus_id = pci_bus_id
        self._poller = Poller(self._poll, interval_s, "opgate-clock-sampler")
        self._nvml_session = contextlib.ExitStack()
        self._sm: list[int] = []
        self._memory: list[int] = []
        self._temperature: list[int] = []
        self._power_mw: list[int] = []
        self._mask = 0
        self._max_sm: int | None = None
        self._max_memory: int | None = None
        self._error = ""
        self._pynvml: Any = None
        self._handle: Any = None

    def __enter__(self) -> ClockSampler:
        from opgate.gpu.probes.device import nvml, nvml_handle_for

        try:
            self._pynvml = self._nvml_session.enter_context(nvml())
            self._handle = nvml_handle_for(self._pynvml, self.pci_bus_id)
        except Exception as exc:  # no NVML, no such device: the probe still runs, without clock evidence
            self._error = f"{type(exc).__name__}: {exc}"
            self._nvml_session.close()
            return self
        self._max_sm = self._read(self._pynvml.nvmlDeviceGetMaxClockInfo, self._pynvml.NVML_CLOCK_SM)
        self._max_memory = self._read(self._pynvml.nvmlDeviceGetMaxClockInfo, self._pynvml.NVML_CLOCK_MEM)
        self._poller.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._poller.stop()
        self._nvml_session.close()

    def _read(self, fn: Any, *args: Any) -> int | None:
        try:
            return int(fn(self._handle, *args))
        except Exception:  # a reading this GPU or VM does not support: leave it out
            return None

    def _poll(self) -> bool:
        pynvml = self._pynvml
        for target, fn, args in ((self._sm, pynvml.nvmlDeviceGetClockInfo, (pynvml.NVML_CLOCK_SM,)),
                                 (self._memory, pynvml.nvmlDeviceGetClockInfo, (pynvml.NVML_CLOCK_MEM,)),
                                 (self._temperature, pynvml.nvmlDeviceGetTemperature, (pynvml.NVML_TEMPERATURE_GPU,)),
                                 (self._power_mw, pynvml.nvmlDeviceGetPowerUsage, ())):
            value = self._read(fn, *args)
            if value is not None:
                target.append(value)
        reasons_fn = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        mask = self._read(reasons_fn) if reasons_fn else None
        self._mask |= mask or 0
        return True

    def window(self) -> ClockWindow:
        if self._error:
            return ClockWindow(0, None, None, None, None, None, None, None, None, (), self._error)
        sm_min, sm_max = _minmax(self._sm)
        memory_min, memory_max = _minmax(self._memory)
        return ClockWindow(len(self._sm), sm_min, sm_max, memory_min, memory_max, self._max_sm, self._max_memory,
                           max(self._temperature) if self._temperature else None,
                           max(self._power_mw) / 1000.0 if self._power_mw else None,
                           decode_reasons(self._pynvml, self._mask))
