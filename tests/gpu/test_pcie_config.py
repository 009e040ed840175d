"""PCI Express capability parsing (payload size, link) and the payload ceiling it gives host copies.
CPU tests on configuration space laid out as the PCI and PCI Express specifications define it, and on the real
sysfs files of whatever machine runs them; one GPU test reads the GPU's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from opgate.gpu.probes.pcie import payload_ceiling_fraction, pcie_theoretical_gbs, tlp_overhead_bytes
from opgate.gpu.probes.pcie_config import (
    PcieConfigError,
    parse_express_capability,
    read_express_facts,
    sysfs_bus_id,
)


def _config(mps: int = 1, mps_supported: int = 2, mrrs: int = 2, speed: int = 5, width: int = 16,
            size: int = 256) -> bytes:
    """A type-0 header with a power-management capability at 0x40 chained to PCI Express at 0x60
    (field codes: payload 128 << code bytes; speed 1 = 2.5 GT/s ... 5 = 32 GT/s)."""
    b = bytearray(size)
    b[0:2] = (0x10DE).to_bytes(2, "little")
    b[0x06] = 0x10  # Status: capability list present
    b[0x34] = 0x40
    b[0x40], b[0x41] = 0x01, 0x60  # power management, next -> 0x60
    b[0x60], b[0x61] = 0x10, 0x00  # PCI Express, end of list
    b[0x64:0x68] = mps_supported.to_bytes(4, "little")  # Device Capabilities
    b[0x68:0x6A] = ((mps << 5) | (mrrs << 12)).to_bytes(2, "little")  # Device Control
    b[0x6C:0x70] = (5 | (16 << 4)).to_bytes(4, "little")  # Link Capabilities: Gen5 x16
    b[0x72:0x74] = (speed | (width << 4)).to_bytes(2, "little")  # Link Status
    return bytes(b)


def test_payload_read_request_and_link_fields() -> None:
    facts = parse_express_capability(_config(mps=1, mps_supported=2, mrrs=2, speed=4, width=8))
    assert facts.max_payload_bytes == 256 and facts.max_payload_supported_bytes == 512
    assert facts.max_read_request_bytes == 512
    assert (facts.link_speed_code, facts.link_width) == (4, 8)
    assert (facts.max_link_speed_code, facts.max_link_width) == (5, 16)


def test_unreadable_or_missing_capability_says_why() -> None:
    with pytest.raises(PcieConfigError, match="root only"):
        parse_express_capability(_config()[:64])  # what a non-root reader gets from sysfs
    no_list = bytearray(_config())
    no_list[0x06] = 0
    with pytest.raises(PcieConfigError, match="no PCI Express capability"):
        parse_express_capability(bytes(no_list))
    looped = bytearray(_config())
    looped[0x41] = 0x40
    with pytest.raises(PcieConfigError, match="loops"):
        parse_express_capability(bytes(looped))
    with pytest.raises(PcieConfigError, match="header alone"):
        parse_express_capability(b"\x00" * 16)


def test_bus_ids_map_to_sysfs_names(tmp_path: Path) -> None:
    assert sysfs_bus_id("00000000:19:00.0") == "0000:19:00.0"  # NVML's spelling
    assert sysfs_bus_id("0000:19:00.0") == "0000:19:00.0"  # CUDA's
    with pytest.raises(PcieConfigError, match="not a PCI bus id"):
        sysfs_bus_id("GPU-1234")
    (tmp_path / "0000:19:00.0").mkdir()
    (tmp_path / "0000:19:00.0" / "config").write_bytes(_config())
    assert read_express_facts("00000000:19:00.0", root=tmp_path).max_payload_bytes == 256
    with pytest.raises(PcieConfigError, match="cannot read"):
        read_express_facts("0000:1a:00.0", root=tmp_path)


def test_this_machines_devices_parse_or_say_why() -> None:
    """Every PCI function this machine exposes either parses or raises PcieConfigError, never anything else."""
    root = Path("/sys/bus/pci/devices")
    devices = sorted(root.iterdir()) if root.is_dir() else []
    if not devices:
        pytest.skip("no /sys/bus/pci/devices on this machine")
    for device in devices:
        try:
            facts = read_express_facts(device.name)
        except PcieConfigError as exc:
            assert str(exc)
            continue
        assert facts.max_payload_bytes in (128, 256, 512, 1024, 2048, 4096)


def test_payload_ceiling_follows_the_packet_overheads() -> None:
    # Gen5: 4-byte STP token + 4-byte LCRC + 16-byte write header / 12-byte completion header.
    assert tlp_overhead_bytes(5, "D2H") == 24 and tlp_overhead_bytes(5, "H2D") == 20
    assert tlp_overhead_bytes(2, "D2H") == 24  # 8b/10b: STP + END symbols + 2-byte sequence number
    assert tlp_overhead_bytes(6, "D2H") is None  # FLIT mode: no ceiling computed
    d2h = payload_ceiling_fraction(5, 256, "D2H")
    assert d2h == pytest.approx(256 / 280)
    assert pcie_theoretical_gbs(5, 16) * d2h == pytest.approx(57.6, abs=0.05)
    assert payload_ceiling_fraction(5, 512, "D2H") > d2h  # bigger packets, less overhead
    with pytest.raises(ValueError):
        tlp_overhead_bytes(5, "sideways")


@pytest.mark.gpu
def test_the_gpus_own_express_capability() -> None:
    from opgate.gpu.probes.device import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"GPU test: {reason}")
    import cupy

    bus_id = cupy.cuda.Device(0).pci_bus_id
    try:
        facts = read_express_facts(bus_id)
    except PcieConfigError as exc:
        pytest.skip(f"the GPU's configuration space cannot tell here: {exc}")
    assert facts.max_payload_bytes in (128, 256, 512, 1024, 2048, 4096)
    assert facts.max_payload_bytes <= facts.max_payload_supported_bytes
    assert 1 <= facts.link_width <= 32 and 1 <= facts.link_speed_code <= 6


def test_a_malformed_domain_is_a_config_error() -> None:
    with pytest.raises(PcieConfigError, match="not a PCI bus id"):
        sysfs_bus_id("zz:19:00.0")
