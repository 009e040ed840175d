"""What a GPU's PCI Express capability says about its link: the programmed Max_Payload_Size (the largest data
packet it may send, which bounds how much of the link a copy can use), the largest it supports, the read-request
size, and the link's speed and width as the device sees them.

Read from the configuration space Linux exposes at /sys/bus/pci/devices/<domain:bus:dev.fn>/config (the first
64 bytes for any user, the rest for root only; the PCI Express capability usually lies beyond the first 64).
Register layout: PCI Local Bus Specification 3.0 section 6.7 (capability list) and PCI Express Base
Specification 3.0 section 7.8 (PCI Express Capability Structure, ID 0x10).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SYSFS_PCI_DEVICES = Path("/sys/bus/pci/devices")
EXPRESS_CAPABILITY_ID = 0x10
STATUS_OFFSET = 0x06
STATUS_HAS_CAPABILITY_LIST = 0x10
CAPABILITY_POINTER_OFFSET = 0x34


class PcieConfigError(Exception):
    """The configuration space cannot tell (not readable, no PCI Express capability, or malformed)."""


@dataclass(frozen=True)
class ExpressFacts:
    max_payload_bytes: int  # Device Control: the MPS this function may use now
    max_payload_supported_bytes: int  # Device Capabilities
    max_read_request_bytes: int  # Device Control
    link_speed_code: int  # Link Status: 1 = 2.5 GT/s (Gen1) ... 5 = 32 GT/s (Gen5)
    link_width: int  # Link Status: negotiated lanes
    max_link_speed_code: int  # Link Capabilities
    max_link_width: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sysfs_bus_id(pci_bus_id: str) -> str:
    """"00000000:19:00.0" (NVML) or "0000:19:00.0" (CUDA) -> "0000:19:00.0", as sysfs names devices."""
    parts = pci_bus_id.strip().lower().split(":")
    if len(parts) != 3 or "." not in parts[2]:
        raise PcieConfigError(f"{pci_bus_id!r} is not a PCI bus id (domain:bus:device.function)")
    domain, bus, devfn = parts
    try:
        return f"{int(domain, 16):04x}:{bus}:{devfn}"
    except ValueError:
        raise PcieConfigError(f"{pci_bus_id!r} is not a PCI bus id (domain:bus:device.function)") from None


def _u16(config: bytes, offset: int) -> int:
    return int.from_bytes(config[offset:offset + 2], "little")


def _u32(config: bytes, offset: int) -> int:
    return int.from_bytes(config[offset:offset + 4], "little")


def find_capability(config: bytes, capability_id: int) -> int | None:
    """Offset of the first capability with `capability_id` in the standard list, or None."""
    if len(config) < 64:
        raise PcieConfigError(f"only {len(config)} bytes of configuration space: the header alone is 64")
    if not _u16(config, STATUS_OFFSET) & STATUS_HAS_CAPABILITY_LIST:
        return None
    pointer = config[CAPABILITY_POINTER_OFFSET] & 0xFC
    seen: set[int] = set()
    while pointer:
        if pointer in seen or pointer + 2 > len(config):
            if pointer + 2 > len(config):
                raise PcieConfigError(f"the capability list continues at 0x{pointer:x}, beyond the {len(config)} "
                                      "bytes readable (the rest of configuration space is readable by root only)")
            raise PcieConfigError(f"the capability list loops at 0x{pointer:x}")
        seen.add(pointer)
        if config[pointer] == capability_id:
            return pointer
        pointer = config[pointer + 1] & 0xFC
    return None


def parse_express_capability(config: bytes) -> ExpressFacts:
    """The PCI Express capability's payload, read-request and link fields from raw configuration space."""
    offset = find_capability(config, EXPRESS_CAPABILITY_ID)
    if offset is None:
        raise PcieConfigError("no PCI Express capability: a conventional PCI function (or an emulated one)")
    if offset + 0x14 > len(config):
        raise PcieConfigError(f"the PCI Express capability at 0x{offset:x} runs past the {len(config)} bytes "
                              "readable (the rest of configuration space is readable by root only)")
    device_capabilities = _u32(config, offset + 0x04)
    device_control = _u16(config, offset + 0x08)
    link_capabilities = _u32(config, offset + 0x0C)
    link_status = _u16(config, offset + 0x12)
    return ExpressFacts(
        max_payload_bytes=128 << ((device_control >> 5) & 0x7),
        max_payload_supported_bytes=128 << (device_capabilities & 0x7),
        max_read_request_bytes=128 << ((device_control >> 12) & 0x7),
        link_speed_code=link_status & 0xF,
        link_width=(link_status >> 4) & 0x3F,
        max_link_speed_code=link_capabilities & 0xF,
        max_link_width=(link_capabilities >> 4) & 0x3F,
    )


def read_express_facts(pci_bus_id: str, root: Path = SYSFS_PCI_DEVICES) -> ExpressFacts:
    """The PCI Express facts of the device at `pci_bus_id`, from its sysfs configuration space."""
    path = root / sysfs_bus_id(pci_bus_id) / "config"
    try:
        config = path.read_bytes()
    except OSError as exc:
        raise PcieConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return parse_express_capability(config)
