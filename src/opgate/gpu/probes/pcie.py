"""PCI Express theoretical bandwidth from the generation and width a link reports.

The per-generation rates and encodings live in data/pcie_link_rates.toml with their PCI-SIG sources;
this module only does the arithmetic: GT/s x lanes x encoding efficiency / 8 bits = GB/s per direction.
"""

from __future__ import annotations

from dataclasses import dataclass

from opgate.data import load_table


@dataclass(frozen=True)
class PcieGeneration:
    generation: int
    transfer_rate_gts: float
    encoding: str
    encoding_efficiency: float
    source: str
    uncertain: bool = False

    def lane_gbs(self) -> float:
        """Usable GB/s per lane and direction after line encoding."""
        return self.transfer_rate_gts * self.encoding_efficiency / 8.0


def pcie_generations() -> dict[int, PcieGeneration]:
    return {
        int(row["generation"]): PcieGeneration(
            generation=int(row["generation"]),
            transfer_rate_gts=float(row["transfer_rate_gts"]),
            encoding=str(row["encoding"]),
            encoding_efficiency=float(row["encoding_efficiency"]),
            source=str(row["source"]),
            uncertain=bool(row.get("uncertain", False)),
        )
        for row in load_table("pcie_link_rates")
    }


class UnknownPcieGeneration(ValueError):
    """The link reports a generation opgate's table does not know (newer than the table)."""


def pcie_theoretical_gbs(generation: int, width: int) -> float:
    """Theoretical GB/s per direction of a PCIe link of `generation` with `width` lanes."""
    if width <= 0:
        raise ValueError(f"a PCIe link cannot have {width} lanes")
    table = pcie_generations()
    if generation not in table:
        known = ", ".join(str(g) for g in sorted(table))
        raise UnknownPcieGeneration(
            f"PCIe generation {generation} is not in data/pcie_link_rates.toml (known: {known}); add a row")
    return table[generation].lane_gbs() * width


def tlp_overhead_bytes(generation: int, direction: str) -> int | None:
    """Bytes per TLP besides its payload (data/pcie_packet_overhead.toml): `direction` "D2H" (memory writes
    from the GPU) or "H2D" (completions carrying host data to the GPU). None for a generation without a row."""
    if direction not in ("D2H", "H2D"):
        raise ValueError(f"direction must be D2H or H2D, not {direction!r}")
    for row in load_table("pcie_packet_overhead"):
        if int(row["generation"]) == generation:
            header = row["write_header_bytes"] if direction == "D2H" else row["completion_header_bytes"]
            return int(row["framing_bytes"]) + int(row["sequence_bytes"]) + int(row["lcrc_bytes"]) + int(header)
    return None


def payload_ceiling_fraction(generation: int, max_payload_bytes: int, direction: str) -> float | None:
    """The most of the encoded link rate a one-way copy can carry as data when every TLP is full
    (`max_payload_bytes`, the link's MPS); an upper bound, as data-link packets are not counted."""
    if max_payload_bytes <= 0:
        raise ValueError(f"a max payload of {max_payload_bytes} bytes is not possible")
    overhead = tlp_overhead_bytes(generation, direction)
    if overhead is None:
        return None
    return max_payload_bytes / (max_payload_bytes + overhead)
