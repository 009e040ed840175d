"""The CUDA occupancy calculator, reimplemented exactly.

The algorithm follows NVIDIA's `cuda_occupancy.h` (CUDA 13.5, `cudaOccMaxActiveBlocksPerMultiprocessor`)
step for step, so that opgate's answer equals `cudaOccupancyMaxActiveBlocksPerMultiprocessor` on the real
GPU (validated against the driver: scripts/occupancy_driver_cases.py and tests/analyze/):

- warps: whole warps per block; `max_warps_per_sm // warps_per_block` blocks.
- registers: allocated per warp in units of 256 (`reg_alloc_unit`), split over 4 sub-partitions: a warp
  lives in one sub-partition, so `(regs_per_sm / 4) // regs_per_warp` warps fit per sub-partition.
  The hardware's per-block check rounds warps up to a multiple of 4.
- shared memory: static + dynamic + the 1 KB the driver reserves per block on CC >= 8, rounded up to
  the allocation unit (128 B on CC >= 8, 256 B before); divided into the SM's shared-memory carve-out.
  By default the carve-out is the largest the SM supports (the driver sizes it per kernel to avoid a
  shared-memory bottleneck); an explicit carve-out preference (percent, like
  cudaFuncAttributePreferredSharedMemoryCarveout) is rounded up to the next supported capacity and
  ignored when one block would not fit.
- blocks: the per-SM block limit of the compute capability.
- barriers (CC >= 9): a budget of 1x or 2x the block limit, divided by the barriers each block uses.

Layers apart: this module only computes; the CLI and `opgate analyze` render the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from opgate.core.limits import SmLimits
from opgate.model.errors import InputError

# cuda_occupancy.h uses INT_MAX for "this resource does not limit"
UNLIMITED = 2**31 - 1
FACTORS = ("warps", "registers", "shared_memory", "blocks", "barriers", "virtual_resources")
FACTOR_LABELS = {
    "warps": "warps per SM",
    "registers": "registers",
    "shared_memory": "shared memory",
    "blocks": "blocks per SM",
    "barriers": "block barriers",
    "virtual_resources": "virtual resources",
}


def _round_up(value: int, unit: int) -> int:
    return unit * ((value + unit - 1) // unit)


def _ceil_div(value: int, unit: int) -> int:
    return (value + unit - 1) // unit


@dataclass(frozen=True)
class KernelLaunch:
    """What occupancy depends on for one kernel launch.

    max_dynamic_shared_bytes: the kernel's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES. None means the
    kernel opted in to exactly the dynamic shared memory it launches with (what Triton and careful CUDA
    code do; a launch above 48 KB needs it). A launch asking for more than this limit gets 0 blocks.
    carveout_percent: None = no preference (driver default); 0..100 = preferred shared-memory carve-out.
    block_barriers: named barriers per block (cudaOccFuncAttributes default: 1).
    """

    threads_per_block: int
    registers_per_thread: int
    static_shared_bytes: int = 0
    dynamic_shared_bytes: int = 0
    max_dynamic_shared_bytes: int | None = None
    carveout_percent: int | None = None
    block_barriers: int = 1
    virtual_resources: int = 0

    def __post_init__(self) -> None:
        if self.threads_per_block < 1:
            raise InputError(f"threads per block must be at least 1, got {self.threads_per_block}")
        if self.registers_per_thread < 0:
            raise InputError(f"registers per thread must be 0 or more, got {self.registers_per_thread}")
        for name in ("static_shared_bytes", "dynamic_shared_bytes", "block_barriers", "virtual_resources"):
            if getattr(self, name) < 0:
                raise InputError(f"{name.replace('_', ' ')} must be 0 or more, got {getattr(self, name)}")
        if self.max_dynamic_shared_bytes is not None and self.max_dynamic_shared_bytes < 0:
            raise InputError(f"max dynamic shared bytes must be 0 or more, got {self.max_dynamic_shared_bytes}")
        if self.carveout_percent is not None and not 0 <= self.carveout_percent <= 100:
            raise InputError(
                f"shared-memory carve-out must be a percentage from 0 to 100, got {self.carveout_percent}"
            )

    @property
    def shared_bytes(self) -> int:
        return self.static_shared_bytes + self.dynamic_shared_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "threads_per_block": self.threads_per_block,
            "registers_per_thread": self.registers_per_thread,
            "static_shared_bytes": self.static_shared_bytes,
            "dynamic_shared_bytes": self.dynamic_shared_bytes,
            "max_dynamic_shared_bytes": self.max_dynamic_shared_bytes,
            "carveout_percent": self.carveout_percent,
            "block_barriers": self.block_barriers,
            "virtual_resources": self.virtual_resources,
        }


@dataclass(frozen=True)
class Suggestion:
    """One change that raises resident warps, e.g. registers 96 -> 80 per thread."""

    factor: str  # the limiting factor it relieves
    parameter: str  # "registers_per_thread", "shared_bytes", "threads_per_block", "block_barriers"
    current: int
    proposed: int
    warps_before: int
    warps_after: int

    @property
    def gain_percent(self) -> float | None:
        """How many more resident warps, in percent; None when the kernel could not run at all before."""
        if self.warps_before == 0:
            return None
        return 100.0 * (self.warps_after - self.warps_before) / self.warps_before

    @property
    def text(self) -> str:
        if self.parameter == "shared_bytes":
            change = f"shared memory {_kb(self.current)} -> {_kb(self.proposed)} per block"
        elif self.parameter == "registers_per_thread":
            change = f"registers {self.current} -> {self.proposed} per thread"
        elif self.parameter == "threads_per_block":
            change = f"threads per block {self.current} -> {self.proposed}"
        else:
            change = f"{self.parameter.replace('_', ' ')} {self.current} -> {self.proposed}"
        gain = self.gain_percent
        if gain is None:
            return f"{change} lets the kernel launch ({self.warps_after} resident warps)"
        return f"{change} gives {gain:.0f}% more resident warps ({self.warps_before} -> {self.warps_after})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "factor": self.factor,
            "parameter": self.parameter,
            "current": self.current,
            "proposed": self.proposed,
            "warps_before": self.warps_before,
            "warps_after": self.warps_after,
            "gain_percent": self.gain_percent,
            "text": self.text,
        }


def _kb(nbytes: int) -> str:
    return f"{nbytes / 1024:.1f} KB" if nbytes % 1024 else f"{nbytes // 1024} KB"


@dataclass(frozen=True)
class OccupancyResult:
    cc: tuple[int, int]
    launch: KernelLaunch
    active_blocks_per_sm: int
    warps_per_block: int
    max_warps_per_sm: int
    block_limits: Mapping[str, int]  # blocks per SM allowed by each factor (UNLIMITED when it does not bind)
    limiting_factors: tuple[str, ...]
    registers_per_block: int  # as allocated (per-warp granularity)
    shared_per_block: int  # as allocated, with the reserved 1 KB on CC >= 8
    smem_config_bytes: int  # the SM's shared-memory capacity the calculation used
    min_carveout_bytes: int | None  # smallest supported capacity giving the same blocks (rest becomes L1)
    reason: str = ""  # why no block fits, when active_blocks_per_sm == 0
    suggestions: tuple[Suggestion, ...] = field(default_factory=tuple)

    @property
    def active_warps_per_sm(self) -> int:
        return self.active_blocks_per_sm * self.warps_per_block

    @property
    def occupancy(self) -> float:
        """Active warps / maximum warps per SM (0..1)."""
        return self.active_warps_per_sm / self.max_warps_per_sm

    @property
    def fits(self) -> bool:
        return self.active_blocks_per_sm > 0

    @property
    def limiter_text(self) -> str:
        return ", ".join(FACTOR_LABELS[f] for f in self.limiting_factors)

    def summary(self) -> str:
        if not self.fits:
            return f"sm_{self.cc[0]}{self.cc[1]}: the block cannot be resident ({self.reason})"
        return (
            f"sm_{self.cc[0]}{self.cc[1]}: {self.active_blocks_per_sm} blocks/SM, "
            f"{self.active_warps_per_sm}/{self.max_warps_per_sm} warps, {self.occupancy:.0%} occupancy "
            f"(limited by {self.limiter_text})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "compute_capability": f"{self.cc[0]}.{self.cc[1]}",
            "launch": self.launch.to_dict(),
            "active_blocks_per_sm": self.active_blocks_per_sm,
            "active_warps_per_sm": self.active_warps_per_sm,
            "max_warps_per_sm": self.max_warps_per_sm,
            "warps_per_block": self.warps_per_block,
            "occupancy": self.occupancy,
            "limiting_factors": list(self.limiting_factors),
            "block_limits": {k: (None if v == UNLIMITED else v) for k, v in self.block_limits.items()},
            "registers_per_block": self.registers_per_block,
            "shared_per_block": self.shared_per_block,
            "smem_config_bytes": self.smem_config_bytes,
            "min_carveout_bytes": self.min_carveout_bytes,
            "reason": self.reason,
            "suggestions": [s.to_dict() for s in self.suggestions],
        }


# -- the calculator, one function per limit, as in cuda_occupancy.h ------------------------------------

def _align_up_carveout(size: int, limits: SmLimits) -> int | None:
    """cudaOccAlignUpShmemSizeVoltaPlus: the smallest supported capacity >= size (None: none is big enough)."""
    for capacity in limits.carveouts_bytes:
        if size <= capacity:
            return capacity
    return None


def _preferred_smem(launch: KernelLaunch, limits: SmLimits) -> int:
    """cudaOccSMemPreferenceVoltaPlus: no preference means the whole shared-memory capacity of the SM."""
    if launch.carveout_percent is None:
        preference = limits.smem_per_sm
    else:
        preference = launch.carveout_percent * limits.smem_per_sm // 100
    aligned = _align_up_carveout(preference, limits)
    assert aligned is not None  # a percentage of smem_per_sm never exceeds the largest carve-out
    return aligned


def _warps_limit(launch: KernelLaunch, limits: SmLimits, warps_per_block: int) -> int:
    if launch.threads_per_block > limits.max_threads_per_block:
        return 0
    return (limits.max_threads_per_sm // limits.warp_size) // warps_per_block


def _registers_limit(launch: KernelLaunch, limits: SmLimits, warps_per_block: int) -> tuple[int, int]:
    """Blocks allowed by registers, and registers allocated per block."""
    regs_per_warp = _round_up(launch.registers_per_thread * limits.warp_size, limits.reg_alloc_unit)
    regs_per_block = regs_per_warp * warps_per_block
    # The hardware check assumes the block's warps are spread over all sub-partitions at once.
    regs_assumed = regs_per_warp * _round_up(warps_per_block, limits.sub_partitions)
    if (
        limits.max_regs_per_block < regs_assumed
        or limits.max_regs_per_block < regs_per_block
        or launch.registers_per_thread > limits.occ_max_regs_per_thread
    ):
        return 0, regs_per_block
    if regs_per_warp == 0:
        return UNLIMITED, regs_per_block
    warps_per_sub_partition = (limits.regs_per_sm // limits.sub_partitions) // regs_per_warp
    return (warps_per_sub_partition * limits.sub_partitions) // warps_per_block, regs_per_block


def _smem_limit(launch: KernelLaunch, limits: SmLimits) -> tuple[int, int, int, str]:
    """Blocks allowed by shared memory, bytes allocated per block, SM capacity used, and why 0 if 0."""
    static = launch.static_shared_bytes + limits.reserved_smem_per_block
    allocated = _round_up(static + launch.dynamic_shared_bytes, limits.smem_alloc_unit)
    max_dynamic = (
        launch.dynamic_shared_bytes if launch.max_dynamic_shared_bytes is None else launch.max_dynamic_shared_bytes
    )
    # cudaOccSMemPerBlock with FUNC_SHMEM_LIMIT_OPTIN (what the runtime header uses for a real kernel)
    if static + max_dynamic > limits.smem_per_block_default:
        per_block_limit = limits.smem_per_block_optin
    else:
        per_block_limit = limits.smem_per_block_default
    per_block_limit += limits.reserved_smem_per_block
    preference = _preferred_smem(launch, limits)
    if launch.dynamic_shared_bytes > max_dynamic:
        return 0, allocated, preference, (
            f"dynamic shared memory {launch.dynamic_shared_bytes} B exceeds the kernel's maximum "
            f"{max_dynamic} B (raise cudaFuncAttributeMaxDynamicSharedMemorySize)"
        )
    if allocated > per_block_limit:
        return 0, allocated, preference, (
            f"{allocated} B of shared memory per block (incl. {limits.reserved_smem_per_block} B reserved) "
            f"exceeds the {per_block_limit} B per-block limit of CC {limits.cc_text}"
        )
    if preference >= allocated:
        capacity = preference
    else:
        # One block does not fit the preferred carve-out: the driver takes the smallest one that does.
        aligned = _align_up_carveout(allocated, limits)
        assert aligned is not None  # allocated <= per-block limit <= largest carve-out
        capacity = aligned
    if allocated == 0:
        return UNLIMITED, 0, capacity, ""
    return capacity // allocated, allocated, capacity, ""


def _barrier_limit(launch: KernelLaunch, limits: SmLimits) -> int:
    if launch.block_barriers == 0:
        return UNLIMITED
    return (limits.barrier_multiplier * limits.max_blocks_per_sm) // launch.block_barriers


def _virtual_limit(launch: KernelLaunch, limits: SmLimits) -> int:
    if limits.virtual_resources_per_sm <= 0 or launch.virtual_resources <= 0:
        return UNLIMITED
    return limits.virtual_resources_per_sm // launch.virtual_resources


def _zero_reason(launch: KernelLaunch, limits: SmLimits, block_limits: Mapping[str, int], smem_reason: str) -> str:
    if block_limits["warps"] == 0:
        return f"{launch.threads_per_block} threads per block exceeds the limit of {limits.max_threads_per_block}"
    if block_limits["registers"] == 0:
        if launch.registers_per_thread > limits.occ_max_regs_per_thread:
            return (f"{launch.registers_per_thread} registers per thread exceeds the limit of "
                    f"{limits.max_regs_per_thread}")
        return (f"{launch.registers_per_thread} registers x {launch.threads_per_block} threads exceeds the "
                f"{limits.max_regs_per_block} registers a block may hold")
    if block_limits["shared_memory"] == 0:
        return smem_reason
    return "a resource limit allows no block"


def calculate(launch: KernelLaunch, limits: SmLimits) -> OccupancyResult:
    """Active blocks per SM and what limits them (cudaOccMaxActiveBlocksPerMultiprocessor), no suggestions."""
    warps_per_block = _ceil_div(launch.threads_per_block, limits.warp_size)
    regs_blocks, regs_per_block = _registers_limit(launch, limits, warps_per_block)
    smem_blocks, smem_per_block, smem_capacity, smem_reason = _smem_limit(launch, limits)
    block_limits = {
        "warps": _warps_limit(launch, limits, warps_per_block),
        "registers": regs_blocks,
        "shared_memory": smem_blocks,
        "blocks": limits.max_blocks_per_sm,
        "virtual_resources": _virtual_limit(launch, limits),
    }
    active = min(block_limits.values())
    factors = [f for f in FACTORS if f in block_limits and block_limits[f] == active]
    # The header applies the barrier budget from Hopper on, after the other limits.
    if limits.cc[0] >= 9 and launch.block_barriers > 0:
        block_limits["barriers"] = _barrier_limit(launch, limits)
        active = min(active, block_limits["barriers"])
        if active == block_limits["barriers"]:
            factors.append("barriers")
    else:
        block_limits["barriers"] = UNLIMITED
    factors = [f for f in factors if block_limits[f] == active]  # a lower barrier limit replaces the others
    min_carveout = None
    if active > 0 and smem_per_block > 0:
        min_carveout = _align_up_carveout(active * smem_per_block, limits)
    elif active > 0:
        min_carveout = limits.carveouts_bytes[0]
    return OccupancyResult(
        cc=limits.cc,
        launch=launch,
        active_blocks_per_sm=active,
        warps_per_block=warps_per_block,
        max_warps_per_sm=limits.max_threads_per_sm // limits.warp_size,
        block_limits={f: block_limits[f] for f in FACTORS},
        limiting_factors=tuple(f for f in FACTORS if f in factors),
        registers_per_block=regs_per_block,
        shared_per_block=smem_per_block,
        smem_config_bytes=smem_capacity,
        min_carveout_bytes=min_carveout,
        reason="" if active > 0 else _zero_reason(launch, limits, block_limits, smem_reason),
    )


# -- what would raise it ---------------------------------------------------------------------------

def _with_shared(launch: KernelLaunch, total: int) -> KernelLaunch:
    """The launch with `total` bytes of shared memory per block, taken off dynamic first, then static."""
    cut = launch.shared_bytes - total
    dynamic_cut = min(cut, launch.dynamic_shared_bytes)
    return replace(
        launch,
        dynamic_shared_bytes=launch.dynamic_shared_bytes - dynamic_cut,
        static_shared_bytes=launch.static_shared_bytes - (cut - dynamic_cut),
        max_dynamic_shared_bytes=None,
    )


def _register_suggestion(launch: KernelLaunch, limits: SmLimits, warps: int) -> Suggestion | None:
    """The largest register count below the current one that raises resident warps."""
    for registers in range(min(launch.registers_per_thread, limits.occ_max_regs_per_thread + 1) - 1, 0, -1):
        after = calculate(replace(launch, registers_per_thread=registers), limits).active_warps_per_sm
        if after > warps:
            return Suggestion("registers", "registers_per_thread", launch.registers_per_thread, registers,
                              warps, after)
    return None


def _shared_suggestion(launch: KernelLaunch, limits: SmLimits, current: OccupancyResult) -> Suggestion | None:
    """The largest shared-memory size per block below the current one that raises resident warps."""
    if launch.shared_bytes == 0:
        return None
    capacity = limits.carveouts_bytes[-1] if launch.carveout_percent is None else current.smem_config_bytes
    reserved = limits.reserved_smem_per_block
    cap_per_block = limits.smem_per_block_optin
    for blocks in range(max(current.active_blocks_per_sm, 0) + 1, limits.max_blocks_per_sm + 1):
        allocation = (capacity // blocks) // limits.smem_alloc_unit * limits.smem_alloc_unit
        total = min(allocation - reserved, cap_per_block, launch.shared_bytes - 1)
        if total < 0:
            return None
        candidate = _with_shared(launch, total)
        after = calculate(candidate, limits).active_warps_per_sm
        if after > current.active_warps_per_sm:
            return Suggestion("shared_memory", "shared_bytes", launch.shared_bytes, total,
                              current.active_warps_per_sm, after)
    return None


def _block_size_suggestion(launch: KernelLaunch, limits: SmLimits, warps: int) -> Suggestion | None:
    """The block size nearest the current one (whole warps) that raises resident warps."""
    best: tuple[int, int, int] | None = None  # (distance, -warps_after, size)
    for size in range(limits.warp_size, limits.max_threads_per_block + 1, limits.warp_size):
        if size == launch.threads_per_block:
            continue
        after = calculate(replace(launch, threads_per_block=size), limits).active_warps_per_sm
        if after > warps:
            key = (abs(size - launch.threads_per_block), -after, size)
            if best is None or key < best:
                best = key
    if best is None:
        return None
    size = best[2]
    after = -best[1]
    return Suggestion("warps", "threads_per_block", launch.threads_per_block, size, warps, after)


def _barrier_suggestion(launch: KernelLaunch, limits: SmLimits, warps: int) -> Suggestion | None:
    for barriers in range(launch.block_barriers - 1, -1, -1):
        after = calculate(replace(launch, block_barriers=barriers), limits).active_warps_per_sm
        if after > warps:
            return Suggestion("barriers", "block_barriers", launch.block_barriers, barriers, warps, after)
    return None


def suggestions_for(result: OccupancyResult, limits: SmLimits) -> tuple[Suggestion, ...]:
    """Single changes to the limiting resources that raise resident warps (empty at full occupancy)."""
    launch = result.launch
    warps = result.active_warps_per_sm
    if warps >= result.max_warps_per_sm:
        return ()
    found: list[Suggestion] = []
    factors = set(result.limiting_factors)
    if "registers" in factors:
        found.append(_register_suggestion(launch, limits, warps))
    if "shared_memory" in factors:
        found.append(_shared_suggestion(launch, limits, result))
    if factors & {"warps", "blocks"} or not result.fits:
        found.append(_block_size_suggestion(launch, limits, warps))
    if "barriers" in factors:
        found.append(_barrier_suggestion(launch, limits, warps))
    return tuple(s for s in found if s is not None)


def occupancy(launch: KernelLaunch, limits: SmLimits, suggest: bool = True) -> OccupancyResult:
    """The occupancy of `launch` on one SM of `limits.cc`, with suggestions of what would raise it."""
    result = calculate(launch, limits)
    if suggest:
        result = replace(result, suggestions=suggestions_for(result, limits))
    return result
