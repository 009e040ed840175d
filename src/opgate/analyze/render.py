"""Terminal rendering for `opgate occupancy` and `opgate analyze`: reporters render, they never judge."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from rich.console import Console
from rich.table import Table

from opgate.core.occupancy import FACTOR_LABELS, UNLIMITED, OccupancyResult

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


def _span(values: Sequence[int], unit: str = "") -> str:
    low, high = min(values), max(values)
    return f"{low}{unit}" if low == high else f"{low}-{high}{unit}"


def render_matrix(outcomes: Sequence["CompileOutcome"], targets: Sequence[str], console: Console,
                  verbose: bool = False) -> None:
    """One row per kernel family (operator / implementation / kernel) with the range over its
    specializations, then what limits each family's occupancy and what would raise it; -v: every variant."""
    if verbose:
        render_matrix_variants(outcomes, targets, console)
    else:
        render_matrix_families(outcomes, targets, console)
    render_limits(outcomes, console)


def render_matrix_families(outcomes: Sequence["CompileOutcome"], targets: Sequence[str], console: Console) -> None:
    from collections import Counter

    from rich.text import Text

    table = Table(title="portability and occupancy per kernel family (range over its specializations)",
                  show_lines=True, expand=False)
    table.add_column("operator / impl / kernel", style="cyan", overflow="fold", ratio=2)
    for target in targets:
        table.add_column(target, overflow="fold", ratio=1)
    families: dict[tuple[str, str, str], dict[str, list]] = {}
    for outcome in outcomes:
        if not outcome.kernels:
            key = (outcome.operator, outcome.implementation, "-")
            families.setdefault(key, {}).setdefault(outcome.target, []).append(outcome)
            continue
        for kernel in outcome.kernels:
            key = (outcome.operator, outcome.implementation, kernel.kernel_name)
            families.setdefault(key, {}).setdefault(outcome.target, []).append(kernel)
    for (operator, implementation, kernel_name), by_target in families.items():
        variants = max(len(v) for v in by_target.values())
        cells = []
        for target in targets:
            items = by_target.get(target, [])
            if not items:
                cells.append("-")
                continue
            statuses = Counter(item.status for item in items)
            worst = next((s for s in ("compile_error", "capture_error", "crashed", "timeout", "resource_overflow",
                                      "spills") if s in statuses), "ok")
            text = ", ".join(f"{status} {n}" if len(items) > 1 else status for status, n in statuses.items())
            regs = [k.registers for k in items if getattr(k, "registers", None) is not None]
            occ = [round(k.occupancy.occupancy * 100) for k in items if getattr(k, "occupancy", None) is not None]
            if regs:
                text += f"\n{_span(regs)} regs"
            if occ:
                text += f"\n{_span(occ, '%')} occ."
            message = next((getattr(i, "message", "") for i in items if getattr(i, "status", "ok") != "ok"), "")
            if message:
                text += f"\n{message[:60]}"
            cells.append(Text(text, style=STATUS_STYLE.get(worst, "red") if worst != "ok" else ""))
        label = f"{operator} / {implementation}\n{kernel_name}" + (f"\n({variants} specializations)"
                                                                    if variants > 1 else "")
        table.add_row(label, *cells)
    console.print(table)


def render_limits(outcomes: Sequence["CompileOutcome"], console: Console) -> None:
    """Per kernel family and target: the lowest-occupancy specialization, what limits it, what would raise it."""
    worst: dict[tuple[str, str, str, str], object] = {}
    for outcome in outcomes:
        for kernel in outcome.kernels:
            if kernel.occupancy is None:
                continue
            key = (outcome.operator, outcome.implementation, kernel.kernel_name, outcome.target)
            current = worst.get(key)
            if current is None or kernel.occupancy.occupancy < current.occupancy.occupancy:  # type: ignore[attr-defined]
                worst[key] = kernel
    if not worst:
        return
    console.print("what limits occupancy (lowest specialization per kernel and target) and what would raise it:")
    for (operator, implementation, kernel_name, target), kernel in worst.items():
        occ = kernel.occupancy  # type: ignore[attr-defined]
        line = (f"  {operator}/{implementation} {kernel_name} on {target}: {occ.occupancy:.0%} "
                f"({kernel.registers} regs, {kernel.num_warps} warps), limited by {occ.limiter_text}")  # type: ignore[attr-defined]
        if occ.suggestions:
            line += f"; {occ.suggestions[0].text}"
        console.print(line, highlight=False, markup=False)


def render_matrix_variants(outcomes: Sequence["CompileOutcome"], targets: Sequence[str], console: Console) -> None:
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
