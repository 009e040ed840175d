"""NVML's clocks, temperature and clock-event reasons around a probe (opgate.gpu.probes.clocks)."""

from __future__ import annotations

import pynvml
import pytest

from opgate.gpu.probes.clocks import ClockSampler, ClockWindow, decode_reasons


def test_reason_bits_decode_to_pynvml_names() -> None:
    mask = pynvml.nvmlClocksEventReasonGpuIdle | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    assert decode_reasons(pynvml, mask) == ("GpuIdle", "HwThermalSlowdown")
    assert decode_reasons(pynvml, 0) == ()


def test_only_slowdowns_count_as_slowdowns() -> None:
    window = ClockWindow(10, 1980, 1980, 3201, 3201, 1980, 3201, 40, 300.0,
                         ("GpuIdle", "ApplicationsClocksSetting", "SwPowerCap"))
    assert window.slowdowns == ("SwPowerCap",)
    assert window.memory_clock_fraction == 1.0
    assert "slowdowns: SwPowerCap" in window.summary()


def test_a_sampler_without_nvml_reports_why_and_never_raises() -> None:
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("NVML is present here: the no-NVML path is for machines without a driver")
    except pynvml.NVMLError:
        pass
    with ClockSampler("0000:01:00.0") as sampler:
        pass
    window = sampler.window()
    assert window.error and window.memory_mhz_min is None and window.samples == 0
    assert window.summary().startswith("clocks not read (")


@pytest.mark.gpu
def test_clocks_seen_while_the_gpu_reads_memory() -> None:
    cupy = pytest.importorskip("cupy")
    from opgate.gpu.probes.device import device_info, gpu_unavailable_reason

    if (reason := gpu_unavailable_reason()) is not None:
        pytest.skip(reason)
    info = device_info(0)
    x = cupy.ones(1 << 28, dtype=cupy.float32)
    with ClockSampler(info.pci_bus_id, interval_s=0.005) as sampler:
        for _ in range(200):
            x.sum()
        cupy.cuda.Device(0).synchronize()
    window = sampler.window()
    assert not window.error and window.samples >= 2
    assert window.memory_mhz_max and window.max_memory_mhz and window.memory_mhz_max <= window.max_memory_mhz
    assert window.sm_mhz_max and window.max_sm_mhz and window.sm_mhz_max <= window.max_sm_mhz
    assert window.temperature_c_max is not None and 0 < window.temperature_c_max < 110
