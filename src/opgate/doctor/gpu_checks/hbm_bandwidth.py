"""doctor.hbm_bandwidth: HBM read stream and D2D copy against the datasheet bandwidth and cudaMemcpy; saves the
measured read ceiling for `opgate verify`."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from opgate.checks.base import CheckContext
from opgate.doctor.gpu_checks.base import (PROBE_BUDGET_NOTE, GpuProbeCheck, band_figure, clock_figures,
                                          device_labels, percent, round_tbs)
from opgate.model.results import CheckResult, Figure, Outcome


class HbmBandwidthCheck(GpuProbeCheck):
    check_id = "doctor.hbm_bandwidth"
    title = "HBM bandwidth (read stream, D2D copy) vs datasheet"
    timeout_s = 120.0
    remediation = ("Check memory clocks and throttle reasons (nvidia-smi -q -d CLOCK,PERFORMANCE), ECC row remapping, "
                   "MIG slicing and other processes on the GPU, then re-run.")

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
            gpu = device_labels(m.device)
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
                figures.append(band_figure(
                    f"{tag}HBM read (opgate kernel)", round_tbs(m.read.tbs), "TB/s", read_band, scale=sheet.tbs,
                    what=f"{read_band.pass_at:.0%} of the {name} datasheet {sheet.tbs:g} TB/s ({sheet.source})",
                    key="hbm.read_bandwidth", labels=gpu))
                figures.append(band_figure(f"{tag}HBM read / datasheet", percent(fraction), "%", read_band,
                                            scale=100.0, key="hbm_bandwidth.hbm_read_datasheet", labels=gpu))
                figures.append(Figure(f"{tag}datasheet memory bandwidth", round_tbs(sheet.tbs), "TB/s",
                                      key="hbm.datasheet_bandwidth", labels=gpu))
                read_text = (f"HBM read {m.read.tbs:.2f} TB/s = {fraction:.1%} of the {sheet.tbs:g} TB/s "
                             f"datasheet (goal {read_band.pass_at:.0%})")
            else:
                read_outcome = Outcome.WARNED
                figures.append(Figure(f"{tag}HBM read (opgate kernel)", round_tbs(m.read.tbs), "TB/s",
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
                figures.append(band_figure(
                    f"{tag}D2D copy (opgate kernel, read+write)", round_tbs(m.copy_kernel.tbs), "TB/s", copy_band,
                    scale=m.memcpy.tbs, what="cudaMemcpy D2D measured in this run, less the tolerance",
                    key="hbm_bandwidth.d2d_copy_opgate_kernel_read_write", labels=gpu))
                figures.append(Figure(f"{tag}cudaMemcpy D2D (read+write)", round_tbs(m.memcpy.tbs), "TB/s",
                                      key="hbm.memcpy_d2d_bandwidth", labels=gpu))
                figures.append(band_figure(f"{tag}copy kernel / cudaMemcpy", percent(ratio), "%", copy_band,
                                            scale=100.0, key="hbm_bandwidth.copy_kernel_cudamemcpy", labels=gpu))
                copy_text = f"; copy kernel {m.copy_kernel.tbs:.2f} vs cudaMemcpy {m.memcpy.tbs:.2f} TB/s"
            if m.torch_copy is not None:
                figures.append(Figure(f"{tag}PyTorch dst.copy_(src) (read+write)", round_tbs(m.torch_copy.tbs), "TB/s",
                                      key="hbm.torch_copy_bandwidth", labels=gpu))
                copy_text += f" (PyTorch copy_ {m.torch_copy.tbs:.2f})"
            else:
                figures.append(Figure(f"{tag}PyTorch dst.copy_(src)", f"not measured: {m.torch_note}",
                                      key="hbm_bandwidth.pytorch_dst_copy_src", labels=gpu))
            figures.append(Figure(f"{tag}read run-to-run spread (p90-p10)/median",
                                  percent(m.read.samples_ms.relative_spread), "%", key="hbm.read_spread", labels=gpu))
            figures.extend(clock_figures(tag + "during the read: ", m.read_clocks, "hbm_bandwidth.during_the_read_",
                                          gpu))
            if read_outcome != Outcome.PASSED and m.read_clocks is not None:
                read_text += f" [{m.read_clocks.summary()}]"  # what the GPU was doing when it read slowly
            figures.append(Figure(f"{tag}buffer", round(m.buffer_bytes / (1 << 30), 2), "GiB", key="hbm.buffer_size",
                                  labels=gpu))
            reasons.append(f"{tag}{name}: {read_text}{copy_text}")
        return self.verdict(outcomes, figures, reasons, self.remediation, extra)
