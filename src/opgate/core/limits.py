"""Per compute capability SM limits and occupancy-calculator constants, from data/sm_limits.toml."""

from __future__ import annotations

import re
from dataclasses import dataclass

from opgate.data import load_table
from opgate.model.errors import InputError


@dataclass(frozen=True)
class SmLimits:
    """What one SM of a compute capability can hold, and how the hardware allocates it (bytes)."""

    cc: tuple[int, int]
    max_blocks_per_sm: int
    max_warps_per_sm: int
    max_threads_per_sm: int
    regs_per_sm: int
    max_regs_per_block: int
    max_regs_per_thread: int
    occ_max_regs_per_thread: int
    max_threads_per_block: int
    warp_size: int
    smem_per_sm: int
    smem_per_block_optin: int
    smem_per_block_default: int
    reserved_smem_per_block: int
    unified_l1_smem_kb: int
    smem_carveouts_kb: tuple[int, ...]
    reg_alloc_unit: int
    sub_partitions: int
    smem_alloc_unit: int
    barrier_multiplier: int
    virtual_resources_per_sm: int
    fp32_lanes_per_sm: int
    source: str
    uncertain_fields: tuple[str, ...] = ()

    @property
    def sm(self) -> int:
        return self.cc[0] * 10 + self.cc[1]

    @property
    def cc_text(self) -> str:
        return f"{self.cc[0]}.{self.cc[1]}"

    @property
    def carveouts_bytes(self) -> tuple[int, ...]:
        return tuple(kb * 1024 for kb in self.smem_carveouts_kb)

    @property
    def max_smem_per_block(self) -> int:
        """The most shared memory one block may use (after opting in), excluding the reserved 1 KB."""
        return self.smem_per_block_optin


def parse_cc(text: str) -> tuple[int, int]:
    """Accept "9.0", "90", "sm_90", "sm_90a", "compute_90", "10.0", "100", "sm_120f"."""
    cleaned = text.strip().lower()
    match = re.fullmatch(r"(\d+)\.(\d)", cleaned)
    if match:
        return int(match.group(1)), int(match.group(2))
    match = re.fullmatch(r"(?:sm_|compute_|sm)?(\d{2,3})[af]?", cleaned)
    if match:
        number = int(match.group(1))
        return number // 10, number % 10
    raise InputError(
        f"compute capability {text!r} is not understood; write it as 9.0, 90 or sm_90"
    )


def _row_cc(row: dict) -> tuple[int, int]:
    major, minor = row["cc"].split(".")
    return int(major), int(minor)


def known_ccs() -> list[tuple[int, int]]:
    return [_row_cc(row) for row in load_table("sm_limits")]


def sm_limits(cc: tuple[int, int] | str) -> SmLimits:
    """The limits of one compute capability; InputError naming the known ones otherwise."""
    wanted = parse_cc(cc) if isinstance(cc, str) else tuple(cc)
    for row in load_table("sm_limits"):
        if _row_cc(row) == wanted:
            return SmLimits(
                cc=_row_cc(row),
                max_blocks_per_sm=row["max_blocks_per_sm"],
                max_warps_per_sm=row["max_warps_per_sm"],
                max_threads_per_sm=row["max_threads_per_sm"],
                regs_per_sm=row["regs_per_sm"],
                max_regs_per_block=row["max_regs_per_block"],
                max_regs_per_thread=row["max_regs_per_thread"],
                occ_max_regs_per_thread=row["occ_max_regs_per_thread"],
                max_threads_per_block=row["max_threads_per_block"],
                warp_size=row["warp_size"],
                smem_per_sm=row["smem_per_sm"],
                smem_per_block_optin=row["smem_per_block_optin"],
                smem_per_block_default=row["smem_per_block_default"],
                reserved_smem_per_block=row["reserved_smem_per_block"],
                unified_l1_smem_kb=row["unified_l1_smem_kb"],
                smem_carveouts_kb=tuple(row["smem_carveouts_kb"]),
                reg_alloc_unit=row["reg_alloc_unit"],
                sub_partitions=row["sub_partitions"],
                smem_alloc_unit=row["smem_alloc_unit"],
                barrier_multiplier=row["barrier_multiplier"],
                virtual_resources_per_sm=row["virtual_resources_per_sm"],
                fp32_lanes_per_sm=row["fp32_lanes_per_sm"],
                source=row["source"],
                uncertain_fields=tuple(row.get("uncertain_fields", ())),
            )
    known = ", ".join(f"{a}.{b}" for a, b in known_ccs())
    raise InputError(
        f"compute capability {wanted[0]}.{wanted[1]} has no SM limits in opgate's table; use one of: {known}"
    )
