"""Terminal rendering for `opgate occupancy` and `opgate analyze`: reporters render, they never judge."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from rich.console import Console
from rich.table import Table

from opgate.analyze.occupancy import FACTOR_LABELS, UNLIMITED, OccupancyResult

if TYPE_CHECKING:  # pragma: no cover
    from opgate.analyze.portability import CompileOutcome


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024} KB"
    if n >= 1024:
        return f"{n / 1024:.1f} KB ({n} B)"
    return f"{n} B"


def render_occupancy(result: OccupancyResult, console: Console, device_label: str) -> None:
    launch = result.launch
    table = Table(title=f"opgate occupancy: {device_label}", show_header=False, expand=False)
    table.add_column("what", style="cyan", no_wrap=True)
    table.add_column("value")
    table.add_row("kernel", f"{launch.threads_per_block} threads/block, {launch.registers_per_thread} registers/thread, "
                  f"{_bytes(launch.static_shared_bytes)} static + {_bytes(launch.dynamic_shared_bytes)} dynamic shared")
    if not result.fits:
        table.add_row("active blocks/SM", "[bold red]0[/]: the block cannot be resident")
        table.add_row("why", result.reason)
    else:
        table.add_row("active blocks/SM", str(result.active_blocks_per_sm))
        table.add_row("active warps/SM", f"{result.active_warps_per_sm} of {result.max_warps_per_sm}")
        table.add_row("occupancy", f"{result.occupancy:.1%}")
        table.add_row("limited by", result.limiter_text)
    limits = ", ".join(
        f"{FACTOR_LABELS[f]} {'-' if v == UNLIMITED else v}" for f, v in result.block_limits.items() if v != UNLIMITED
    )
    table.add_row("blocks allowed by", limits)
    table.add_row("registers/block", f"{result.registers_per_block} (allocated per warp in units of 256)")
    table.add_row("shared memory/block", f"{_bytes(result.shared_per_block)} allocated (incl. reserved)")
    carveout = _bytes(result.smem_config_bytes)
    if result.min_carveout_bytes is not None and result.min_carveout_bytes != result.smem_config_bytes:
        carveout += f"; {_bytes(result.min_carveout_bytes)} is the smallest carve-out with the same occupancy"
    table.add_row("shared-memory carve-out", carveout)
    for index, suggestion in enumerate(result.suggestions):
        table.add_row("to raise it" if index == 0 else "", suggestion.text)
    console.print(table)


STATUS_STYLE = {"ok": "green", "compile_error": "bold red", "resource_overflow": "yellow", "capture_error": "bold red",
                "timeout": "bold magenta", "crashed": "bold magenta", "spills": "yellow"}


def render_matrix(outcomes: Sequence["CompileOutcome"], targets: Sequence[str], console: Console) -> None:
    """Rows: operator / implementation / kernel; columns: targets; cells: ok, regs, warps, or the failure."""
    table = Table(title="portability and occupancy (registers, shared memory, occupancy per target)",
                  show_lines=True, expand=False)
    table.add_column("operator / implementation / kernel", style="cyan")
    for target in targets:
        table.add_column(target, no_wrap=False)
    rows: dict[tuple[str, str, str], dict[str, str]] = {}
    for outcome in outcomes:
        if not outcome.kernels:
            key = (outcome.operator, outcome.implementation, "-")
            style = STATUS_STYLE.get(outcome.status, "red")
            rows.setdefault(key, {})[outcome.target] = f"[{style}]{outcome.status}[/]\n{outcome.message[:80]}"
            continue
        for kernel in outcome.kernels:
            key = (outcome.operator, outcome.implementation, kernel.label)
            style = STATUS_STYLE.get(kernel.status, "red")
            cell = f"[{style}]{kernel.status}[/]"
            if kernel.registers is not None:
                cell += f"\n{kernel.registers} regs, {_bytes(kernel.shared_bytes)}"
            if kernel.occupancy is not None:
                occ = kernel.occupancy
                cell += f"\n{occ.active_warps_per_sm}/{occ.max_warps_per_sm} warps ({occ.occupancy:.0%})"
            if kernel.status != "ok" and kernel.message:
                cell += f"\n{kernel.message[:80]}"
            rows.setdefault(key, {})[outcome.target] = cell
    for (operator, implementation, kernel), cells in rows.items():
        table.add_row(f"{operator} / {implementation}\n{kernel}", *(cells.get(t, "-") for t in targets))
    console.print(table)
