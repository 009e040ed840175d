"""doctor.host_links: H2D/D2H, pinned and pageable, against the ceiling the link's packet size leaves and its PCIe
generation x width; every GPU to the host at once on a multi-GPU host."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from opgate.checks.base import CheckContext
from opgate.doctor.gpu_checks.base import GpuProbeCheck, band_figure, device_labels, percent, round_gbs
from opgate.model.results import CheckResult, Figure, Outcome

if TYPE_CHECKING:
    from opgate.gpu.probes.host_links import PcieLink


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
            figures.append(Figure(f"{tag}{direction} ceiling at {payload}-byte packets "
                                  "(data/pcie_packet_overhead.toml)", round_gbs(ceiling), "GB/s",
                                  key="host_links.packet_ceiling",
                                  labels={**gpu, "direction": direction, "payload_bytes": str(payload)}))
            figures.append(Figure(f"{tag}{direction} pinned / that ceiling", percent(measured / ceiling), "%",
                                  key="host_links.pinned_that_ceiling", labels={**gpu, "direction": direction}))
            clauses.append(f"{direction} {measured / ceiling:.0%} of {ceiling:.1f}")
    if not clauses:
        return ""
    return f"; at {payload}-byte packets TLP overhead leaves at most: " + ", ".join(clauses) + " GB/s"


class HostLinksCheck(GpuProbeCheck):
    check_id = "doctor.host_links"
    title = "Host links: H2D/D2H, pinned and pageable, vs the link's packet-size ceiling and PCIe generation x width"
    timeout_s = 120.0
    remediation = ("Check the link generation/width (nvidia-smi -q -d PCI; a GPU in a slower slot or behind a shared "
                   "switch), IOMMU/ACS settings, NUMA placement of the process (numactl --cpunodebind), and that "
                   "transfers use pinned memory.")

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
            gpu = gpus[device] = device_labels(m.device)
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
                    band_figure(f"{tag}H2D pinned", round_gbs(m.h2d_pinned.gbs), "GB/s", verdict.band,
                                 verdict.reference_h2d_gbs, whats[0], key="host_links.h2d_pinned", labels=gpu),
                    band_figure(f"{tag}D2H pinned", round_gbs(m.d2h_pinned.gbs), "GB/s", verdict.band,
                                 verdict.reference_d2h_gbs, whats[1], key="host_links.d2h_pinned", labels=gpu),
                    Figure(f"{tag}H2D pinned / PCIe generation x width", percent(m.h2d_pinned.gbs / theoretical), "%",
                           key="host_links.h2d_pinned_pcie_generation_x_width", labels=gpu),
                    Figure(f"{tag}D2H pinned / PCIe generation x width", percent(m.d2h_pinned.gbs / theoretical), "%",
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
                figures += [Figure(f"{tag}H2D pinned", round_gbs(m.h2d_pinned.gbs), "GB/s", key="host_links.h2d_pinned",
                                   labels=gpu),
                            Figure(f"{tag}D2H pinned", round_gbs(m.d2h_pinned.gbs), "GB/s", key="host_links.d2h_pinned",
                                   labels=gpu)]
                reasons.append(f"{tag}pinned H2D {m.h2d_pinned.gbs:.1f} / D2H {m.d2h_pinned.gbs:.1f} GB/s, not "
                               f"judged: no PCIe link figure ({why})")
            bidir = m.bidirectional_pinned
            figures += [
                Figure(f"{tag}H2D pageable", round_gbs(m.h2d_pageable.gbs), "GB/s", key="host_links.h2d_pageable",
                       labels=gpu),
                Figure(f"{tag}D2H pageable", round_gbs(m.d2h_pageable.gbs), "GB/s", key="host_links.d2h_pageable",
                       labels=gpu),
                Figure(f"{tag}both directions at once (pinned, aggregate)", round_gbs(bidir.aggregate_gbs), "GB/s",
                       key="host_links.bidirectional_aggregate", labels=gpu),
                Figure(f"{tag}both at once: H2D share", round_gbs(bidir.h2d_gbs), "GB/s",
                       key="host_links.bidirectional_h2d", labels=gpu),
                Figure(f"{tag}both at once: D2H share", round_gbs(bidir.d2h_gbs), "GB/s",
                       key="host_links.bidirectional_d2h", labels=gpu),
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
                    figures.append(Figure(f"GPU{device} {direction} with all GPUs at once", round_gbs(gbs), "GB/s",
                                          key=f"host_links.{way}_with_all_gpus_at_once", labels=gpus[device]))
                    if alone[device][direction] > 0:
                        figures.append(Figure(f"GPU{device} {direction} all-at-once / alone",
                                              percent(gbs / alone[device][direction]), "%",
                                              key=f"host_links.{way}_all_at_once_alone", labels=gpus[device]))
                figures.append(Figure(f"all GPUs {direction} at once, aggregate", round_gbs(c.aggregate_gbs), "GB/s",
                                      key=f"host_links.all_gpus_{way}_at_once_aggregate"))
                figures.append(band_figure(f"all GPUs {direction} at once, spread (max-min)/max", percent(spread), "%",
                                            spread_band, scale=100.0,
                                            key=f"host_links.all_gpus_{way}_at_once_spread_max_min_max"))
                reasons.append(f"all {len(devices)} GPUs {direction} at once: {c.aggregate_gbs:.1f} GB/s aggregate, "
                               f"spread {spread:.0%}")
        return self.verdict(outcomes, figures, reasons, self.remediation, extra)
