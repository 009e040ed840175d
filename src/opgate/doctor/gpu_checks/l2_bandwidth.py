"""doctor.l2_bandwidth: L2 read bandwidth over an L2-resident working set against HBM read; saves the measured
L2 ceiling for `opgate explain`."""

from __future__ import annotations

import dataclasses
from typing import Any

from opgate.checks.base import CheckContext
from opgate.doctor.gpu_checks.base import (PROBE_BUDGET_NOTE, GpuProbeCheck, band_figure, device_labels,
                                          round_tbs)
from opgate.model.results import CheckResult, Figure, Outcome


class L2BandwidthCheck(GpuProbeCheck):
    check_id = "doctor.l2_bandwidth"
    title = "L2 cache bandwidth and the HBM/L2 ratio"
    remediation = ("An L2-resident working set should read faster than HBM; check for MIG slicing or a persisting-L2 "
                   "carve-out (cudaLimitPersistingL2CacheSize) and other work on the GPU.")

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
            gpu = device_labels(m.device)
            figures += [
                Figure(f"{tag}L2 read (opgate kernel)", round_tbs(m.l2_read.tbs), "TB/s", key="l2.read_bandwidth",
                       labels=gpu),
                Figure(f"{tag}HBM read (same kernel family, this run)", round_tbs(m.hbm_read.tbs), "TB/s",
                       key="l2.hbm_read_bandwidth", labels=gpu),
                Figure(f"{tag}HBM / L2 bandwidth ratio", round(m.hbm_over_l2, 3), "", key="l2.hbm_over_l2", labels=gpu),
                band_figure(f"{tag}L2 / HBM bandwidth ratio", round(m.l2_over_hbm, 3), "x", band,
                             key="l2_bandwidth.l2_hbm_bandwidth_ratio", labels=gpu),
                Figure(f"{tag}L2 size (device attribute)", round(m.device.l2_bytes / 1e6, 1), "MB", key="l2.size",
                       labels=gpu),
                Figure(f"{tag}working set", round(m.working_set_bytes / (1 << 20), 1), "MiB", key="l2.working_set",
                       labels=gpu),
            ]
            reasons.append(f"{tag}L2 read {m.l2_read.tbs:.2f} TB/s over a {m.working_set_bytes / (1 << 20):.0f} MiB "
                           f"working set, {m.l2_over_hbm:.2f}x HBM read ({m.hbm_read.tbs:.2f} TB/s); "
                           f"HBM/L2 = {m.hbm_over_l2:.2f}")
        return self.verdict(outcomes, figures, reasons, self.remediation, extra)
