"""`opgate doctor --level standard`'s measured GPU checks: one check per file over `base.GpuProbeCheck`, each
registered under its own `opgate.checks` entry point (pyproject.toml). They run alone (`exclusive`), only at the
standard level, and are `skipped` with the reason without a usable GPU."""

from __future__ import annotations

from typing import Sequence

from opgate.doctor.gpu_checks.base import GpuProbeCheck
from opgate.doctor.gpu_checks.event_timing import EventTimingCheck
from opgate.doctor.gpu_checks.hbm_bandwidth import HbmBandwidthCheck
from opgate.doctor.gpu_checks.host_links import HostLinksCheck
from opgate.doctor.gpu_checks.l2_bandwidth import L2BandwidthCheck
from opgate.doctor.gpu_checks.launch_latency import LaunchLatencyCheck
from opgate.doctor.gpu_checks.p2p import P2PCheck
from opgate.doctor.gpu_checks.stream_priority import StreamPriorityCheck

STANDARD_CHECKS: Sequence[type[GpuProbeCheck]] = (
    HbmBandwidthCheck, L2BandwidthCheck, HostLinksCheck, P2PCheck, LaunchLatencyCheck, StreamPriorityCheck,
    EventTimingCheck,
)

__all__ = ["STANDARD_CHECKS", "EventTimingCheck", "GpuProbeCheck", "HbmBandwidthCheck", "HostLinksCheck",
           "L2BandwidthCheck", "LaunchLatencyCheck", "P2PCheck", "StreamPriorityCheck"]
