"""Pure judgement of pinned host copies: against the ceiling the link's packet size leaves, when known.

A one-way copy can carry at most max_payload / (max_payload + TLP overhead) of the encoded link rate as data
(`opgate.gpu.probes.pcie.payload_ceiling_fraction`); at the 256-byte payloads of most hosts that is ~91% of PCIe
generation x width, so a goal of 90% of the raw rate is unreachable (issue 16: every method measured 87-88%
on the H200). The verdict uses that ceiling when the link's max payload is readable, and falls back to the raw
rate (issue 6's band) when it is not; the raw figure is always shown beside.
"""

from __future__ import annotations

from dataclasses import dataclass

from opgate.gpu.judge.bands import judge
from opgate.gpu.judge.references import Band
from opgate.model.results import Outcome

BASIS_PAYLOAD = "payload ceiling"
BASIS_RAW = "PCIe generation x width"


@dataclass(frozen=True)
class HostLinkVerdict:
    outcome: Outcome
    basis: str  # BASIS_PAYLOAD or BASIS_RAW: what the copies were judged against
    band: Band
    reference_h2d_gbs: float  # what 1.0 means, per direction
    reference_d2h_gbs: float
    fraction_h2d: float
    fraction_d2h: float
    raw_gbs: float

    @property
    def worst_fraction(self) -> float:
        return min(self.fraction_h2d, self.fraction_d2h)


def judge_host_link(h2d_gbs: float, d2h_gbs: float, raw_gbs: float, ceiling_h2d_gbs: float | None,
                    ceiling_d2h_gbs: float | None, payload_band: Band, raw_band: Band) -> HostLinkVerdict:
    """The verdict on pinned H2D/D2H copies: the worse direction against its reference."""
    if raw_gbs <= 0:
        raise ValueError(f"a raw PCIe rate of {raw_gbs} GB/s is not possible")
    if ceiling_h2d_gbs and ceiling_d2h_gbs:
        basis, band, ref_h2d, ref_d2h = BASIS_PAYLOAD, payload_band, ceiling_h2d_gbs, ceiling_d2h_gbs
    else:
        basis, band, ref_h2d, ref_d2h = BASIS_RAW, raw_band, raw_gbs, raw_gbs
    fraction_h2d, fraction_d2h = h2d_gbs / ref_h2d, d2h_gbs / ref_d2h
    outcome = judge(min(fraction_h2d, fraction_d2h), band)
    return HostLinkVerdict(outcome, basis, band, ref_h2d, ref_d2h, fraction_h2d, fraction_d2h, raw_gbs)
