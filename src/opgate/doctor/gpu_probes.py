"""`opgate doctor --level standard`: measured GPU probes, one check per probe family.

Each check measures with opgate.gpu (CUDA events around opgate's own kernels, cudaMemcpy, PyTorch's
plain equivalent where there is one) and judges the figures against the datasheet peak and the
per-model bands of data/gpu_probe_policy.toml. They run alone (`exclusive`), so no other check competes
for the GPU, and only at the standard level. Without a usable GPU each is `skipped` with the reason.
"""

from __future__ import annotations

import traceback
import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Sequence, TypeVar

from opgate.checks.base import Check, CheckContext
from opgate.errors import SkipCheck
from opgate.results import CheckResult, Figure, Outcome, gpu_labels, slug, worst_outcome

if TYPE_CHECKING:  # the probes import CuPy-side modules lazily, inside each check
    from opgate.gpu.probes.device import DeviceInfo
    from opgate.gpu.probes.host_links import PcieLink
    from opgate.gpu.probes.clocks import ClockWindow

T = TypeVar("T")
PROBE_BUDGET_NOTE = "measured with CUDA events after warm-up; medians of repeated runs"


def _tbs(value: float) -> float:
    return round(value, 3)


def _gbs(value: float) -> float:
    return round(value, 1)


def _us(value: float) -> float:
    return round(value, 3)


def _pct(value: float) -> float:
    return round(100.0 * value, 1)


class GpuProbeCheck(Check):
    """Base of the measured probes: standard level only, alone on the GPU, skipped without one.

    A subclass implements `probe(ctx)`. CUDA errors raised by a probe become an `error` result explained
    from data/cuda_errors.toml; `ProbeError` (a probe's own self-check failed) becomes `error` too.
    """

    levels: ClassVar[tuple[str, ...]] = ("standard",)
    exclusive: ClassVar[bool] = True
    timeout_s: ClassVar[float] = 90.0
    # Device-local probes run once per GPU, side by side, in children that each see one GPU (doctor/fanout.py).
    device_local: ClassVar[bool] = False

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
            explained = _explain_cuda_exception(exc)
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


def _explain_cuda_exception(exc: BaseException) -> str | None:
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


def _band_figure(name: str, value: float | str, unit: str, band: Any, scale: float = 1.0, what: str = "", *,
                 key: str, labels: dict[str, str] | None = None) -> Figure:
    from opgate.gpu.judge.bands import band_threshold

    return Figure(name, value, unit, band_threshold(band, scale=scale, what=what), key=key, labels=labels or {})


def _device_labels(device: DeviceInfo) -> dict[str, str]:
    """The labels of the GPU a figure measured: its index and PCI bus id."""
    return gpu_labels(device.index, pci_bus_id=device.pci_bus_id)


def _clock_figures(prefix: str, clocks: ClockWindow | None, key_prefix: str, labels: dict[str, str]) -> list[Figure]:
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


# -------------------------------------------------------------------------------------------------
class HbmBandwidthCheck(GpuProbeCheck):
    check_id = "doctor.hbm_bandwidth"
    title = "HBM bandwidth (read stream, D2D copy) vs datasheet"
    timeout_s = 120.0

    def probe(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.probes.bandwidth import measure_hbm
        from opgate.gpu.judge.bands import judge
        from opgate.gpu.judge.references import datasheet_bandwidth, gpu_key_for, policy_band

        devices = self.devices()
        figures: list[Figure] = []
        outcomes: list[Outcome] = []
        reasons: list[str] = []
        extra: dict[str, Any] = {"method": PROBE_BUDGET_NOTE, "gpus": []}
        measurements = self.measure_each(devices, lambda device: measure_hbm(device, include_torch=True))
        for device, m in zip(devices, measurements):
            tag = self.label(device, len(devices))
            gpu = _device_labels(m.device)
            name = m.device.name
            from opgate.gpu.judge.ceilings import MeasuredCeilings, save_ceilings

            # `opgate verify` judges kernel timings against what this card measured, not only the datasheet.
            save_ceilings(name, MeasuredCeilings(name, m.read.tbs * 1e12, time.time(), self.check_id))
            key = gpu_key_for(name)
            sheet = datasheet_bandwidth(name)
            read_band = policy_band("hbm_read_fraction", key)
            copy_band = policy_band("copy_vs_memcpy", key)
            extra["gpus"].append({**m.to_dict(), "gpu_key": key,
                                  "datasheet": dataclasses.asdict(sheet) if sheet else None,
                                  "read_band": dataclasses.asdict(read_band),
                                  "copy_band": dataclasses.asdict(copy_band)})
            if sheet is not None:
                fraction = m.read.tbs / sheet.tbs
                read_outcome = judge(fraction, read_band)
                figures.append(_band_figure(
                    f"{tag}HBM read (opgate kernel)", _tbs(m.read.tbs), "TB/s", read_band, scale=sheet.tbs,
                    what=f"{read_band.pass_at:.0%} of the {name} datasheet {sheet.tbs:g} TB/s ({sheet.source})",
                    key="hbm.read_bandwidth", labels=gpu))
                figures.append(_band_figure(f"{tag}HBM read / datasheet", _pct(fraction), "%", read_band,
                                            scale=100.0, key="hbm_bandwidth.hbm_read_datasheet", labels=gpu))
                figures.append(Figure(f"{tag}datasheet memory bandwidth", _tbs(sheet.tbs), "TB/s",
                                      key="hbm.datasheet_bandwidth", labels=gpu))
                read_text = (f"HBM read {m.read.tbs:.2f} TB/s = {fraction:.1%} of the {sheet.tbs:g} TB/s "
                             f"datasheet (goal {read_band.pass_at:.0%})")
            else:
                read_outcome = Outcome.WARNED
                figures.append(Figure(f"{tag}HBM read (opgate kernel)", _tbs(m.read.tbs), "TB/s",
                                      key="hbm.read_bandwidth", labels=gpu))
                read_text = (f"HBM read {m.read.tbs:.2f} TB/s, not judged: opgate has no datasheet bandwidth for "
                             f"{name!r} (add it to data/gpu_probe_thresholds.toml)")
            outcomes.append(read_outcome)
            copy_text = ""
            if m.copy_kernel is not None and m.memcpy is not None:
                ratio = m.copy_kernel.tbs / m.memcpy.tbs
                copy_outcome = judge(ratio, copy_band)
                if copy_outcome == Outcome.FAILED:  # our kernel lagging the driver's copy is not the host's fault
                    copy_outcome = Outcome.WARNED
                outcomes.append(copy_outcome)
                figures.append(_band_figure(
                    f"{tag}D2D copy (opgate kernel, read+write)", _tbs(m.copy_kernel.tbs), "TB/s", copy_band,
                    scale=m.memcpy.tbs, what="cudaMemcpy D2D measured in this run, less the tolerance",
                    key="hbm_bandwidth.d2d_copy_opgate_kernel_read_write", labels=gpu))
                figures.append(Figure(f"{tag}cudaMemcpy D2D (read+write)", _tbs(m.memcpy.tbs), "TB/s",
                                      key="hbm.memcpy_d2d_bandwidth", labels=gpu))
                figures.append(_band_figure(f"{tag}copy kernel / cudaMemcpy", _pct(ratio), "%", copy_band,
                                            scale=100.0, key="hbm_bandwidth.copy_kernel_cudamemcpy", labels=gpu))
                copy_text = f"; copy kernel {m.copy_kernel.tbs:.2f} vs cudaMemcpy {m.memcpy.tbs:.2f} TB/s"
            if m.torch_copy is not None:
                figures.append(Figure(f"{tag}PyTorch dst.copy_(src) (read+write)", _tbs(m.torch_copy.tbs), "TB/s",
                                      key="hbm.torch_copy_bandwidth", labels=gpu))
                copy_text += f" (PyTorch copy_ {m.torch_copy.tbs:.2f})"
            else:
                figures.append(Figure(f"{tag}PyTorch dst.copy_(src)", f"not measured: {m.torch_note}",
                                      key="hbm_bandwidth.pytorch_dst_copy_src", labels=gpu))
            figures.append(Figure(f"{tag}read run-to-run spread (p90-p10)/median",
                                  _pct(m.read.samples_ms.relative_spread), "%", key="hbm.read_spread", labels=gpu))
            figures.extend(_clock_figures(tag + "during the read: ", m.read_clocks, "hbm_bandwidth.during_the_read_",
                                          gpu))
            if read_outcome != Outcome.PASSED and m.read_clocks is not None:
                read_text += f" [{m.read_clocks.summary()}]"  # what the GPU was doing when it read slowly
            figures.append(Figure(f"{tag}buffer", round(m.buffer_bytes / (1 << 30), 2), "GiB", key="hbm.buffer_size",
                                  labels=gpu))
            reasons.append(f"{tag}{name}: {read_text}{copy_text}")
        outcome = worst_outcome(outcomes)
        remediation = ""
        if outcome in (Outcome.WARNED, Outcome.FAILED):
            remediation = ("Check memory clocks and throttle reasons (nvidia-smi -q -d CLOCK,PERFORMANCE), ECC "
                           "row remapping, MIG slicing and other processes on the GPU, then re-run.")
        return self.result(outcome, "; ".join(reasons), figures=figures, remediation=remediation, extra=extra)


# -------------------------------------------------------------------------------------------------
class L2BandwidthCheck(GpuProbeCheck):
    check_id = "doctor.l2_bandwidth"
    title = "L2 cache bandwidth and the HBM/L2 ratio"

    def probe(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.probes.bandwidth import measure_l2
        from opgate.gpu.judge.bands import judge
        from opgate.gpu.judge.references import gpu_key_for, policy_band

        devices = self.devices()
        figures: list[Figure] = []
        outcomes: list[Outcome] = []
        reasons: list[str] = []
        extra: dict[str, Any] = {"method": PROBE_BUDGET_NOTE, "gpus": []}
        for device, m in zip(devices, self.measure_each(devices, measure_l2)):
            tag = self.label(device, len(devices))
            band = policy_band("l2_over_hbm", gpu_key_for(m.device.name))
            from opgate.gpu.judge.ceilings import save_l2_ceiling

            # `opgate explain` draws the roofline point against this card's measured L2 ceiling.
            save_l2_ceiling(m.device.name, m.l2_read.tbs * 1e12, self.check_id, m.hbm_read.tbs * 1e12)
            outcomes.append(judge(m.l2_over_hbm, band))
            extra["gpus"].append({**m.to_dict(), "band": dataclasses.asdict(band)})
            gpu = _device_labels(m.device)
            figures += [
                Figure(f"{tag}L2 read (opgate kernel)", _tbs(m.l2_read.tbs), "TB/s", key="l2.read_bandwidth",
                       labels=gpu),
                Figure(f"{tag}HBM read (same kernel family, this run)", _tbs(m.hbm_read.tbs), "TB/s",
                       key="l2.hbm_read_bandwidth", labels=gpu),
                Figure(f"{tag}HBM / L2 bandwidth ratio", round(m.hbm_over_l2, 3), "", key="l2.hbm_over_l2", labels=gpu),
                _band_figure(f"{tag}L2 / HBM bandwidth ratio", round(m.l2_over_hbm, 3), "x", band,
                             key="l2_bandwidth.l2_hbm_bandwidth_ratio", labels=gpu),
                Figure(f"{tag}L2 size (device attribute)", round(m.device.l2_bytes / 1e6, 1), "MB", key="l2.size",
                       labels=gpu),
                Figure(f"{tag}working set", round(m.working_set_bytes / (1 << 20), 1), "MiB", key="l2.working_set",
                       labels=gpu),
            ]
            reasons.append(f"{tag}L2 read {m.l2_read.tbs:.2f} TB/s over a {m.working_set_bytes / (1 << 20):.0f} MiB "
                           f"working set, {m.l2_over_hbm:.2f}x HBM read ({m.hbm_read.tbs:.2f} TB/s); "
                           f"HBM/L2 = {m.hbm_over_l2:.2f}")
        outcome = worst_outcome(outcomes)
        remediation = "" if outcome == Outcome.PASSED else (
            "An L2-resident working set should read faster than HBM; check for MIG slicing or a persisting-L2 "
            "carve-out (cudaLimitPersistingL2CacheSize) and other work on the GPU.")
        return self.result(outcome, "; ".join(reasons), figures=figures, remediation=remediation, extra=extra)


def _payload_ceiling(link: PcieLink, h2d_gbs: float, d2h_gbs: float, tag: str, figures: list[Figure],
                     gpu: dict[str, str]) -> str:
    """Figures for the ceiling the link's max payload size puts on a copy (the verdict's reference when known,
    opgate.gpu.judge.host_link) and a clause for the reason; or why the payload is unknown."""
    if link.express is None:
        figures.append(Figure(f"{tag}PCIe max payload", f"unknown: {link.express_error}",
                              key="host_links.pcie_max_payload", labels=gpu))
        return ""
    payload = link.express.max_payload_bytes
    figures.append(Figure(f"{tag}PCIe max payload (device control)", payload, "bytes", key="host_links.max_payload",
                          labels=gpu))
    clauses = []
    for direction, measured in (("H2D", h2d_gbs), ("D2H", d2h_gbs)):
        ceiling = link.payload_ceiling_gbs(direction)
        if ceiling:
            figures.append(Figure(f"{tag}{direction} ceiling at {payload}-byte packets (data/pcie_packet_overhead.toml)",
                                  _gbs(ceiling), "GB/s", key="host_links.packet_ceiling",
                                  labels={**gpu, "direction": direction, "payload_bytes": str(payload)}))
            figures.append(Figure(f"{tag}{direction} pinned / that ceiling", _pct(measured / ceiling), "%",
                                  key="host_links.pinned_that_ceiling", labels={**gpu, "direction": direction}))
            clauses.append(f"{direction} {measured / ceiling:.0%} of {ceiling:.1f}")
    if not clauses:
        return ""
    return f"; at {payload}-byte packets TLP overhead leaves at most: " + ", ".join(clauses) + " GB/s"


# -------------------------------------------------------------------------------------------------
class HostLinksCheck(GpuProbeCheck):
    check_id = "doctor.host_links"
    title = "Host links: H2D/D2H, pinned and pageable, vs the link's packet-size ceiling and PCIe generation x width"
    timeout_s = 120.0

    def probe(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.probes.host_links import measure_all_to_host, measure_host_links
        from opgate.gpu.judge.host_link import BASIS_PAYLOAD, judge_host_link
        from opgate.gpu.judge.bands import judge, relative_spread
        from opgate.gpu.judge.references import gpu_key_for, policy_band

        devices = self.devices()
        figures: list[Figure] = []
        outcomes: list[Outcome] = []
        reasons: list[str] = []
        extra: dict[str, Any] = {"method": "pinned: CUDA events; pageable: host clock around copy + synchronize",
                                 "gpus": []}
        alone: dict[int, dict[str, float]] = {}
        gpus: dict[int, dict[str, str]] = {}
        for device in devices:
            m = measure_host_links(device)
            tag = self.label(device, len(devices))
            gpu = gpus[device] = _device_labels(m.device)
            band = policy_band("pinned_vs_pcie", gpu_key_for(m.device.name))
            extra["gpus"].append({**m.to_dict(), "band": dataclasses.asdict(band)})
            alone[device] = {"H2D": m.h2d_pinned.gbs, "D2H": m.d2h_pinned.gbs}
            theoretical = m.link.theoretical_gbs() if m.link else None
            if theoretical:
                link = m.link
                assert link is not None
                gen = link.under_load_generation or link.idle_generation
                width = link.under_load_width or link.idle_width
                verdict = judge_host_link(m.h2d_pinned.gbs, m.d2h_pinned.gbs, theoretical,
                                          link.payload_ceiling_gbs("H2D") if link.express else None,
                                          link.payload_ceiling_gbs("D2H") if link.express else None,
                                          policy_band("pinned_vs_payload_ceiling", gpu_key_for(m.device.name)),
                                          band)
                outcomes.append(verdict.outcome)
                if verdict.basis == BASIS_PAYLOAD:
                    payload = link.express.max_payload_bytes if link.express else 0
                    whats = [f"{verdict.band.pass_at:.0%} of the {direction} ceiling {ref:.2f} GB/s that "
                             f"{payload}-byte packets leave on PCIe Gen{gen} x{width} (data/pcie_packet_overhead.toml, "
                             "data/pcie_link_rates.toml, PCI-SIG)"
                             for direction, ref in (("H2D", verdict.reference_h2d_gbs),
                                                    ("D2H", verdict.reference_d2h_gbs))]
                else:
                    whats = [f"{band.pass_at:.0%} of PCIe Gen{gen} x{width} = {theoretical:.2f} GB/s per direction "
                             "(data/pcie_link_rates.toml, PCI-SIG; the link's max payload is unknown)"] * 2
                extra["gpus"][-1]["verdict_basis"] = verdict.basis
                extra["gpus"][-1]["verdict_band"] = dataclasses.asdict(verdict.band)
                figures += [
                    _band_figure(f"{tag}H2D pinned", _gbs(m.h2d_pinned.gbs), "GB/s", verdict.band,
                                 verdict.reference_h2d_gbs, whats[0], key="host_links.h2d_pinned", labels=gpu),
                    _band_figure(f"{tag}D2H pinned", _gbs(m.d2h_pinned.gbs), "GB/s", verdict.band,
                                 verdict.reference_d2h_gbs, whats[1], key="host_links.d2h_pinned", labels=gpu),
                    Figure(f"{tag}H2D pinned / PCIe generation x width", _pct(m.h2d_pinned.gbs / theoretical), "%",
                           key="host_links.h2d_pinned_pcie_generation_x_width", labels=gpu),
                    Figure(f"{tag}D2H pinned / PCIe generation x width", _pct(m.d2h_pinned.gbs / theoretical), "%",
                           key="host_links.d2h_pinned_pcie_generation_x_width", labels=gpu),
                    Figure(f"{tag}verdict basis", verdict.basis, key="host_links.verdict_basis", labels=gpu),
                    Figure(f"{tag}PCIe link under load", f"Gen{gen} x{width}", key="host_links.pcie_link_under_load",
                           labels=gpu),
                    Figure(f"{tag}PCIe link max", f"Gen{link.max_generation} x{link.max_width}",
                           key="host_links.pcie_link_max", labels=gpu),
                    Figure(f"{tag}PCIe theoretical per direction", round(theoretical, 2), "GB/s",
                           key="host_links.pcie_raw_rate", labels=gpu),
                ]
                degraded = ""
                max_theory = link.max_theoretical_gbs()
                if max_theory and max_theory > theoretical * 1.01:
                    degraded = f" (link runs below its Gen{link.max_generation} x{link.max_width} maximum)"
                reasons.append(f"{tag}pinned H2D {m.h2d_pinned.gbs:.1f} / D2H {m.d2h_pinned.gbs:.1f} GB/s = "
                               f"{m.h2d_pinned.gbs / theoretical:.0%} / {m.d2h_pinned.gbs / theoretical:.0%} of "
                               f"PCIe Gen{gen} x{width} ({theoretical:.1f} GB/s){degraded}"
                               + _payload_ceiling(link, m.h2d_pinned.gbs, m.d2h_pinned.gbs, tag, figures, gpu)
                               + f"; judged against the {verdict.basis} (goal >= {verdict.band.pass_at:.0%})")
            else:
                outcomes.append(Outcome.WARNED)
                why = m.link_error or (m.link.note if m.link else "") or "NVML reported no PCIe generation/width"
                figures += [Figure(f"{tag}H2D pinned", _gbs(m.h2d_pinned.gbs), "GB/s", key="host_links.h2d_pinned",
                                   labels=gpu),
                            Figure(f"{tag}D2H pinned", _gbs(m.d2h_pinned.gbs), "GB/s", key="host_links.d2h_pinned",
                                   labels=gpu)]
                reasons.append(f"{tag}pinned H2D {m.h2d_pinned.gbs:.1f} / D2H {m.d2h_pinned.gbs:.1f} GB/s, not "
                               f"judged: no PCIe link figure ({why})")
            bidir = m.bidirectional_pinned
            figures += [
                Figure(f"{tag}H2D pageable", _gbs(m.h2d_pageable.gbs), "GB/s", key="host_links.h2d_pageable",
                       labels=gpu),
                Figure(f"{tag}D2H pageable", _gbs(m.d2h_pageable.gbs), "GB/s", key="host_links.d2h_pageable",
                       labels=gpu),
                Figure(f"{tag}both directions at once (pinned, aggregate)", _gbs(bidir.aggregate_gbs), "GB/s",
                       key="host_links.bidirectional_aggregate", labels=gpu),
                Figure(f"{tag}both at once: H2D share", _gbs(bidir.h2d_gbs), "GB/s", key="host_links.bidirectional_h2d",
                       labels=gpu),
                Figure(f"{tag}both at once: D2H share", _gbs(bidir.d2h_gbs), "GB/s", key="host_links.bidirectional_d2h",
                       labels=gpu),
            ]
        if len(devices) > 1:
            spread_band = policy_band("host_contention_spread", None)
            extra["all_gpus_at_once"] = []
            for direction in ("H2D", "D2H"):
                c = measure_all_to_host(devices, direction)
                extra["all_gpus_at_once"].append(c.to_dict())
                values = list(c.per_gpu_gbs.values())
                spread = relative_spread(values)
                outcomes.append(judge(spread, spread_band))
                way = direction.lower()
                for device, gbs in c.per_gpu_gbs.items():
                    figures.append(Figure(f"GPU{device} {direction} with all GPUs at once", _gbs(gbs), "GB/s",
                                          key=f"host_links.{way}_with_all_gpus_at_once", labels=gpus[device]))
                    if alone[device][direction] > 0:
                        figures.append(Figure(f"GPU{device} {direction} all-at-once / alone",
                                              _pct(gbs / alone[device][direction]), "%",
                                              key=f"host_links.{way}_all_at_once_alone", labels=gpus[device]))
                figures.append(Figure(f"all GPUs {direction} at once, aggregate", _gbs(c.aggregate_gbs), "GB/s",
                                      key=f"host_links.all_gpus_{way}_at_once_aggregate"))
                figures.append(_band_figure(f"all GPUs {direction} at once, spread (max-min)/max", _pct(spread), "%",
                                            spread_band, scale=100.0,
                                            key=f"host_links.all_gpus_{way}_at_once_spread_max_min_max"))
                reasons.append(f"all {len(devices)} GPUs {direction} at once: {c.aggregate_gbs:.1f} GB/s aggregate, "
                               f"spread {spread:.0%}")
        outcome = worst_outcome(outcomes)
        remediation = "" if outcome == Outcome.PASSED else (
            "Check the link generation/width (nvidia-smi -q -d PCI; a GPU in a slower slot or behind a shared "
            "switch), IOMMU/ACS settings, NUMA placement of the process (numactl --cpunodebind), and that "
            "transfers use pinned memory.")
        return self.result(outcome, "; ".join(reasons), figures=figures, remediation=remediation, extra=extra)


# -------------------------------------------------------------------------------------------------
class P2PCheck(GpuProbeCheck):
    check_id = "doctor.p2p"
    title = "Peer-to-peer bandwidth and latency between every GPU pair"

    def probe(self, ctx: CheckContext) -> CheckResult:
        # The link matrix (issue 20): copy, SM read/write and latency per ordered pair beside NVML's topology,
        # judged in opgate.gpu.judge.link_matrix.
        from opgate.gpu.judge.link_matrix import link_matrix_verdict, unknown_links
        from opgate.gpu.probes.link_matrix import measure_link_matrix
        from opgate.gpu.judge.references import policy_band
        from opgate.probes.nvml import NvmlUnavailable
        from opgate.probes.topology import collect_topology

        devices = self.devices()
        if len(devices) < 2:
            raise SkipCheck(f"{len(devices)} GPU visible: peer-to-peer needs two or more")
        m = measure_link_matrix(devices)
        try:
            topology = collect_topology()
            links, numa = [list(row) for row in topology.links], [g.numa_node for g in topology.gpus]
        except NvmlUnavailable as exc:
            links, numa = unknown_links(len(devices), str(exc)), []
        verdict = link_matrix_verdict(m.pairs, links, numa, policy_band("p2p_pair_vs_siblings", None))
        extra = {**m.p2p.to_dict(), "link_matrix": m.to_dict(), "links": links, "numa": numa,
                 "matrix_text": verdict.matrix_text}
        return self.result(verdict.outcome, verdict.reason, verdict.figures, remediation=verdict.remediation,
                           extra=extra)


# -------------------------------------------------------------------------------------------------
class LaunchLatencyCheck(GpuProbeCheck):
    check_id = "doctor.launch_latency"
    title = "Kernel launch latency: eager vs CUDA graph replay"
    device_local = True

    def probe(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.judge.bands import judge
        from opgate.gpu.probes.launch import measure_launch_latency
        from opgate.gpu.judge.references import gpu_key_for, has_model_band, policy_band

        m = measure_launch_latency(0)
        key = gpu_key_for(m.device.name)
        ratio_band = policy_band("graph_over_eager", key)
        outcomes = [judge(m.graph_over_eager, ratio_band)]
        eager_fig = Figure("eager launch, per kernel (events around 1000 launches)", _us(m.eager_us.median), "us",
                           key="launch_latency.eager_launch_per_kernel_events_around_1000_launches")
        graph_fig = Figure("CUDA graph replay, per kernel", _us(m.graph_us.median), "us",
                           key="launch_latency.cuda_graph_replay_per_kernel")
        if has_model_band("eager_launch_us", key):
            band = policy_band("eager_launch_us", key)
            outcomes.append(judge(m.eager_us.median, band))
            eager_fig = _band_figure(eager_fig.name, eager_fig.value, "us", band, key=eager_fig.key)
        if has_model_band("graph_launch_us", key):
            band = policy_band("graph_launch_us", key)
            outcomes.append(judge(m.graph_us.median, band))
            graph_fig = _band_figure(graph_fig.name, graph_fig.value, "us", band, key=graph_fig.key)
        figures = [
            eager_fig, graph_fig,
            _band_figure("graph / eager per-kernel time", round(m.graph_over_eager, 3), "x", ratio_band,
                         key="launch_latency.graph_eager_per_kernel_time"),
            Figure("host time per eager launch call", _us(m.host_enqueue_us.median), "us",
                   key="launch_latency.host_time_per_eager_launch_call"),
            Figure("eager p95", _us(m.eager_us.p95), "us", key="launch_latency.eager_p95"),
            Figure("graph p95", _us(m.graph_us.p95), "us", key="launch_latency.graph_p95"),
            Figure("graph capture of 1000 launches", round(m.graph_capture_ms, 2), "ms",
                   key="launch_latency.graph_capture_of_1000_launches"),
        ]
        outcome = worst_outcome(outcomes)
        reason = (f"{m.device.name}: {m.eager_us.median:.2f} us per kernel launched eagerly, "
                  f"{m.graph_us.median:.2f} us per kernel replayed from a graph "
                  f"({1 / m.graph_over_eager:.1f}x less)")
        remediation = "" if outcome == Outcome.PASSED else (
            "Slow launches point at a loaded or power-saving host CPU (check the CPU governor and other "
            "processes) or at a driver in a debug/profiling mode (CUDA_LAUNCH_BLOCKING, a profiler attached).")
        return self.result(outcome, reason, figures=figures, remediation=remediation, extra=m.to_dict())


# -------------------------------------------------------------------------------------------------
class StreamPriorityCheck(GpuProbeCheck):
    check_id = "doctor.stream_priority"
    title = "Stream priority under a saturated GPU"
    device_local = True

    def probe(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.judge.bands import judge
        from opgate.gpu.probes.priority import measure_stream_priority
        from opgate.gpu.judge.references import gpu_key_for, policy_band

        m = measure_stream_priority(0)
        if not m.supported:
            raise SkipCheck(f"{m.device.name} reports no stream priorities (range {m.greatest_priority}.."
                            f"{m.least_priority} from {m.range_source})")
        assert m.high_us is not None and m.equal_us is not None and m.idle_us is not None
        band = policy_band("priority_over_equal", gpu_key_for(m.device.name))
        ratio = m.high_over_equal
        outcome = judge(ratio, band)
        figures = [
            Figure("priority range (greatest..least)", f"{m.greatest_priority}..{m.least_priority}",
                   key="stream_priority.priority_range_greatest_least"),
            Figure("probe latency, idle GPU", _us(m.idle_us.median), "us",
                   key="stream_priority.probe_latency_idle_gpu"),
            Figure("probe latency, highest priority, GPU saturated", _us(m.high_us.median), "us",
                   key="stream_priority.probe_latency_highest_priority_gpu_saturated"),
            Figure("probe latency, equal priority, GPU saturated", _us(m.equal_us.median), "us",
                   key="stream_priority.probe_latency_equal_priority_gpu_saturated"),
            _band_figure("highest / equal priority latency", round(ratio, 3), "x", band,
                         key="stream_priority.highest_equal_priority_latency"),
            Figure("one low-priority hog kernel alone", round(m.hog_kernel_ms, 3), "ms",
                   key="stream_priority.one_low_priority_hog_kernel_alone"),
            Figure("highest priority p95", _us(m.high_us.p95), "us", key="stream_priority.highest_priority_p95"),
            Figure("equal priority p95", _us(m.equal_us.p95), "us", key="stream_priority.equal_priority_p95"),
        ]
        reason = (f"short kernel under saturation: {m.high_us.median:.1f} us on the highest-priority stream vs "
                  f"{m.equal_us.median:.1f} us at equal priority ({ratio:.2f}x; idle {m.idle_us.median:.1f} us)")
        remediation = "" if outcome == Outcome.PASSED else (
            "Priority did not help: check that no MPS server or time-slicing configuration flattens priorities, "
            "and that the latency-critical work really runs on a stream created with the greatest priority.")
        return self.result(outcome, reason, figures=figures, remediation=remediation, extra=m.to_dict())


# -------------------------------------------------------------------------------------------------
class EventTimingCheck(GpuProbeCheck):
    check_id = "doctor.event_timing"
    title = "Event timing resolution, launch round trip and launch queue health"
    device_local = True

    def probe(self, ctx: CheckContext) -> CheckResult:
        from opgate.gpu.probes.events import measure_event_timing
        from opgate.gpu.judge.bands import judge
        from opgate.gpu.judge.references import gpu_key_for, policy_band

        m = measure_event_timing(0)
        key = gpu_key_for(m.device.name)
        resolution_band = policy_band("event_resolution_us", key)
        roundtrip_band = policy_band("event_roundtrip_us", key)
        outcomes = [judge(m.roundtrip_us.median, roundtrip_band)]
        problems: list[str] = []
        if m.timer_step_us is None:
            outcomes.append(Outcome.WARNED)
            problems.append(f"event timing told only {m.timer_step_readings} distinct durations apart among kernels "
                            "waiting 0-23 us: its step could not be found")
        else:
            outcomes.append(judge(m.timer_step_us, resolution_band))
        if not m.launch_returned_before_done:
            outcomes.append(Outcome.FAILED)
            problems.append("a launch call did not return before its kernel finished (launches are synchronous: "
                            "CUDA_LAUNCH_BLOCKING=1 or a blocking profiler?)")
        if m.spin_error_fraction > 0.05:
            outcomes.append(Outcome.WARNED)
            problems.append(f"events measured a {m.spin_requested_us:.0f} us %globaltimer wait as "
                            f"{m.spin_event_us.median:.0f} us ({m.spin_error_fraction:.0%} off)")
        depth = ("never blocked" if m.queue_depth_before_block is None
                 else f"{m.queue_depth_before_block} launches")
        figures = [
            _band_figure(f"event timer step (smallest gap among {m.timer_step_readings} distinct timed durations)",
                         "not found" if m.timer_step_us is None else round(m.timer_step_us, 3), "us",
                         resolution_band, key=f"event_timing.event_timer_step_smallest_gap_among_"
                                              f"{m.timer_step_readings}_distinct_timed_durations"),
            Figure("smallest non-zero interval between back-to-back events (cost of one record)",
                   _us(m.smallest_step_us), "us",
                   key="event_timing.smallest_non_zero_interval_between_back_to_back_events_cost_of_one_record"),
            Figure("median interval between back-to-back events", _us(m.back_to_back_us.median), "us",
                   key="event_timing.median_interval_between_back_to_back_events"),
            Figure("back-to-back intervals reported as 0", m.zero_intervals,
                   key="event_timing.back_to_back_intervals_reported_as_0"),
            Figure(f"{m.spin_requested_us:.0f} us %globaltimer wait, timed by events", _us(m.spin_event_us.median),
                   "us", key=f"event_timing.{m.spin_requested_us:.0f}_us_pct_globaltimer_wait_timed_by_events"),
            _band_figure("launch + event round trip seen by the host (median)", _us(m.roundtrip_us.median), "us",
                         roundtrip_band, key="event_timing.launch_event_round_trip_seen_by_the_host_median"),
            Figure("launch + event round trip p95", _us(m.roundtrip_us.p95), "us",
                   key="event_timing.launch_event_round_trip_p95"),
            Figure("launch call while the GPU is busy", _us(m.launch_call_us), "us",
                   key="event_timing.launch_call_while_the_gpu_is_busy"),
            Figure("launch returned before its kernel finished", m.launch_returned_before_done,
                   key="event_timing.launch_returned_before_its_kernel_finished"),
            Figure(f"launch queue depth before the host blocked (of {m.queue_probe_launches})", depth,
                   key=f"event_timing.launch_queue_depth_before_the_host_blocked_of_{m.queue_probe_launches}"),
            Figure(f"stream order of {m.chain_steps} dependent kernels", "correct" if m.chain_ok else "WRONG",
                   key=f"event_timing.stream_order_of_{m.chain_steps}_dependent_kernels"),
        ]
        outcome = worst_outcome(outcomes)
        step = "not found" if m.timer_step_us is None else f"{m.timer_step_us * 1e3:.0f} ns"
        reason = (f"event timer step {step} (back-to-back records {m.smallest_step_us:.2f} us apart), "
                  f"launch round trip {m.roundtrip_us.median:.1f} us "
                  f"(p95 {m.roundtrip_us.p95:.1f}), launches asynchronous, queue {depth}, stream order correct")
        if problems:
            reason += "; " + "; ".join(problems)
        remediation = "" if outcome == Outcome.PASSED else (
            "Check CUDA_LAUNCH_BLOCKING, attached profilers or debuggers, and host CPU load/frequency.")
        return self.result(outcome, reason, figures=figures, remediation=remediation, extra=m.to_dict())


STANDARD_CHECKS: Sequence[type[GpuProbeCheck]] = (
    HbmBandwidthCheck, L2BandwidthCheck, HostLinksCheck, P2PCheck, LaunchLatencyCheck, StreamPriorityCheck,
    EventTimingCheck,
)

