"""The base of `opgate doctor --level standard`'s measured GPU checks, one check per file beside it.

Each check measures with opgate.gpu.probes (CUDA events around opgate's own kernels, cudaMemcpy, PyTorch's plain
equivalent where there is one), judges the figures with opgate.gpu.judge against the datasheet peak and the per-model
bands of data/gpu_probe_policy.toml, and returns `verdict(...)`. The base owns what every one of them repeats: standard
level only, alone on the GPU (`exclusive`), `skipped` with the reason without a usable GPU, CUDA errors explained,
device-local probes fanned out one child per GPU, the figures' rounding, GPU labels, band thresholds and NVML clocks.
"""

from __future__ import annotations

import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, ClassVar, TypeVar

from opgate.checks.base import Check, CheckContext
from opgate.model.errors import SkipCheck
from opgate.model.results import CheckResult, Figure, Outcome, gpu_labels, slug

if TYPE_CHECKING:  # the probes import CuPy-side modules lazily, inside each check
    from opgate.gpu.probes.clocks import ClockWindow
    from opgate.gpu.probes.device import DeviceInfo

T = TypeVar("T")
PROBE_BUDGET_NOTE = "measured with CUDA events after warm-up; medians of repeated runs"


def round_tbs(value: float) -> float:
    return round(value, 3)


def round_gbs(value: float) -> float:
    return round(value, 1)


def round_us(value: float) -> float:
    return round(value, 3)


def percent(value: float) -> float:
    return round(100.0 * value, 1)


class GpuProbeCheck(Check):
    """Base of the measured probes: standard level only, alone on the GPU, skipped without one.

    A subclass implements `probe(ctx)` and returns `self.verdict(outcomes, figures, reasons, self.remediation, extra)`
    (or a judge's own verdict). CUDA errors raised by a probe become an `error` result explained
    from data/cuda_errors.toml; `ProbeError` (a probe's own self-check failed) becomes `error` too.
    """

    levels: ClassVar[tuple[str, ...]] = ("standard",)
    exclusive: ClassVar[bool] = True
    timeout_s: ClassVar[float] = 90.0
    # Device-local probes run once per GPU, side by side, in children that each see one GPU (doctor/fanout.py).
    device_local: ClassVar[bool] = False
    # What to check when the verdict is a warning or a failure (`verdict` shows it only then).
    remediation: ClassVar[str] = ""

    def probe(self, ctx: CheckContext) -> CheckResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.probes.device import GpuUnavailable, ProbeError, gpu_unavailable_reason

        reason = gpu_unavailable_reason()
        if reason:
            raise SkipCheck(reason)
        if self.device_local:
            from opgate.doctor.fanout import in_fanout_child, run_per_gpu

            devices = [] if in_fanout_child() else self.devices()
            if len(devices) > 1:
                return run_per_gpu(self.check_id, self.title, f"{type(self).__module__}:{type(self).__name__}",
                                   max(10.0, self.timeout_s - 10.0), ctx, devices)
        try:
            return self.probe(ctx)
        except GpuUnavailable as exc:
            raise SkipCheck(str(exc)) from None
        except ProbeError as exc:
            return self.result(Outcome.ERROR, f"measurement unusable: {exc}",
                               remediation="This is the probe's own self-check failing, not a verdict on the "
                               "GPU; re-run with --check to isolate it and report it with the JSON report.",
                               extra={"traceback": traceback.format_exc(limit=8)})
        except Exception as exc:
            explained = explain_cuda_exception(exc)
            if explained is None:
                raise
            return self.result(Outcome.ERROR, f"CUDA error during the probe: {type(exc).__name__}: {exc}",
                               remediation=explained, extra={"traceback": traceback.format_exc(limit=8)})

    # -- shared helpers --------------------------------------------------------------------------
    @staticmethod
    def devices() -> list[int]:
        from opgate.gpu.probes.device import device_count

        return list(range(device_count()))

    @staticmethod
    def measure_each(devices: list[int], measure: Callable[[int], T]) -> list[T]:
        """`measure(device)` for every GPU, in device order, all GPUs at once. Only for device-local probes
        (HBM, L2): each GPU reads its own memory, so they do not compete, and a host with 8 GPUs stays inside
        the level's time budget. Probes that time the host or the shared PCIe path run one GPU at a time."""
        if len(devices) <= 1:
            return [measure(device) for device in devices]
        with ThreadPoolExecutor(max_workers=len(devices), thread_name_prefix="opgate-gpu-probe") as pool:
            return list(pool.map(measure, devices))

    @staticmethod
    def label(device: int, count: int) -> str:
        return f"GPU{device} " if count > 1 else ""


def explain_cuda_exception(exc: BaseException) -> str | None:
    """One-line explanation for CUDA runtime/driver errors and NVRTC compile failures, else None."""
    kind = type(exc).__name__
    if kind == "CompileException":
        return ("NVRTC could not compile opgate's probe kernels for this GPU; check that CuPy's NVRTC "
                "matches the driver (opgate doctor's driver_runtime check)")
    if not kind.startswith("CUDA"):
        return None
    from opgate.gpu.judge.cuda_errors import cuda_error_code_in, explain_cuda_error

    code = getattr(exc, "status", None)
    if not isinstance(code, int):
        code = cuda_error_code_in(str(exc))
    info = explain_cuda_error(code) if code is not None else None
    return info.one_line() if info else f"CUDA reported {exc}; see the CUDA runtime API error list"


def band_figure(name: str, value: float | str, unit: str, band: Any, scale: float = 1.0, what: str = "", *,
                 key: str, labels: dict[str, str] | None = None) -> Figure:
    from opgate.gpu.judge.bands import band_threshold

    return Figure(name, value, unit, band_threshold(band, scale=scale, what=what), key=key, labels=labels or {})


def device_labels(device: DeviceInfo) -> dict[str, str]:
    """The labels of the GPU a figure measured: its index and PCI bus id."""
    return gpu_labels(device.index, pci_bus_id=device.pci_bus_id)


def clock_figures(prefix: str, clocks: ClockWindow | None, key_prefix: str, labels: dict[str, str]) -> list[Figure]:
    """NVML's view of the probe window: a slow figure beside a memory clock under its maximum or a thermal
    or power slowdown points at the cause. `key_prefix` begins each figure's key ("hbm_bandwidth.during_the_read_")."""
    if clocks is None:
        return []
    if clocks.error:
        return [Figure(f"{prefix}clocks", f"not read: {clocks.error}", key=f"{key_prefix}clocks", labels=labels)]
    figures = []
    if clocks.memory_mhz_min is not None:
        figures.append(Figure(f"{prefix}memory clock (lowest seen, of max {clocks.max_memory_mhz})",
                              clocks.memory_mhz_min, "MHz", labels=labels,
                              key=f"{key_prefix}memory_clock_lowest_seen_of_max_{slug(str(clocks.max_memory_mhz))}"))
    if clocks.sm_mhz_min is not None:
        figures.append(Figure(f"{prefix}SM clock (lowest-highest, of max {clocks.max_sm_mhz})",
                              f"{clocks.sm_mhz_min}-{clocks.sm_mhz_max}", "MHz", labels=labels,
                              key=f"{key_prefix}sm_clock_lowest_highest_of_max_{slug(str(clocks.max_sm_mhz))}"))
    if clocks.temperature_c_max is not None:
        figures.append(Figure(f"{prefix}GPU temperature (highest)", clocks.temperature_c_max, "C",
                              key=f"{key_prefix}gpu_temperature_highest", labels=labels))
    if clocks.power_w_max is not None:
        figures.append(Figure(f"{prefix}board power (NVML averaged reading, highest)", round(clocks.power_w_max, 1),
                              "W", key=f"{key_prefix}board_power_nvml_averaged_reading_highest", labels=labels))
    figures.append(Figure(f"{prefix}clock slowdowns (NVML clock-event reasons)",
                          ", ".join(clocks.slowdowns) or "none",
                          key=f"{key_prefix}clock_slowdowns_nvml_clock_event_reasons", labels=labels))
    return figures
