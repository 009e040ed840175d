"""opgate's GPU probe figures beside PyTorch's plain equivalents and the references, measured in one run.

Issue 6 asks for every probe figure "beside its reference and beside PyTorch's plain equivalent measured in
the same run". The doctor keeps its probes lean (no torch import where the probe does not need it, to stay
within the standard level's 30 s); this script runs the probes (`opgate.gpu.*`) and the equivalents
(`opgate.gpu.probes.torch_equivalents`) in one process, one after the other, and prints a markdown table.

    PYTHONPATH=src python3 benchmarks/probes_vs_torch.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def _try(label: str, action: Callable[[], Any], notes: list[str]) -> Any:
    """Run one measurement; a failure becomes a note in the table, not the end of the run."""
    try:
        return action()
    except Exception as exc:  # noqa: BLE001 - the table says what could not be measured and why
        notes.append(f"{label}: {type(exc).__name__}: {exc}")
        return None


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no torch or no driver: a single-GPU table
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args()

    from opgate.gpu.probes import torch_equivalents as te
    from opgate.gpu.probes.bandwidth import measure_hbm, measure_l2
    from opgate.gpu.probes.events import measure_event_timing
    from opgate.gpu.probes.host_links import measure_host_links
    from opgate.gpu.probes.launch import measure_launch_latency
    from opgate.gpu.probes.priority import measure_stream_priority
    from opgate.gpu.judge.references import datasheet_bandwidth

    started = time.perf_counter()
    notes: list[str] = []
    dev = args.device
    hbm = _try("opgate HBM probe", lambda: measure_hbm(dev, include_torch=True), notes)
    torch_read = _try("PyTorch x.sum()", lambda: te.hbm_read(dev, hbm.read.bytes_per_run if hbm else 4 << 30),
                      notes)
    l2 = _try("opgate L2 probe", lambda: measure_l2(dev), notes)
    links = _try("opgate host-link probe", lambda: measure_host_links(dev), notes)
    torch_links = _try("PyTorch pinned copy_", lambda: te.host_copies(dev), notes)
    launch = _try("opgate launch probe", lambda: measure_launch_latency(dev), notes)
    torch_launch = _try("PyTorch x.add_(1)", lambda: te.launch_overhead(dev), notes)
    priority = _try("opgate stream-priority probe", lambda: measure_stream_priority(dev), notes)
    torch_priority = _try("PyTorch stream priority", lambda: te.stream_priority(dev), notes)
    events = _try("opgate event-timing probe", lambda: measure_event_timing(dev), notes)
    torch_events = _try("PyTorch torch.cuda.Event", lambda: te.event_timing(dev), notes)
    torch_timer = _try("PyTorch event timer step", lambda: te.event_timer_step(dev), notes)

    peers: list[tuple[Any, Any]] = []  # (opgate PeerPair, PyTorch figure) for every ordered pair
    if gpu_count() >= 2:
        from opgate.gpu.probes.p2p import measure_p2p

        p2p = _try("opgate peer-to-peer probe", measure_p2p, notes)
        for pair in (p2p.pairs if p2p else ()):
            peers.append((pair, _try(f"PyTorch copy_ GPU {pair.src} -> {pair.dst}",
                                     lambda pair=pair: te.peer_copy(pair.src, pair.dst), notes)))

    name = hbm.device.name if hbm else (links.device.name if links else "GPU")
    sheet = datasheet_bandwidth(name)
    pcie = links.link.theoretical_gbs() if links and links.link else None
    link_text = (f"Gen{links.link.under_load_generation or links.link.idle_generation} "
                 f"x{links.link.under_load_width or links.link.idle_width}") if links and links.link else ""

    def cell(value: float | None, unit: str, digits: int = 2) -> str:
        return "—" if value is None else f"{value:.{digits}f} {unit}"

    rows = [
        ("HBM read", cell(hbm.read.tbs if hbm else None, "TB/s"),
         cell(torch_read.value if torch_read else None, "TB/s") + " (`x.sum()`)",
         f"datasheet {sheet.tbs:.2f} TB/s" if sheet else "no datasheet figure"),
        ("D2D copy (read + write)", cell(hbm.copy_kernel.tbs if hbm and hbm.copy_kernel else None, "TB/s"),
         cell(hbm.torch_copy.tbs if hbm and hbm.torch_copy else None, "TB/s") + " (`dst.copy_(src)`)",
         "cudaMemcpy D2D " + cell(hbm.memcpy.tbs if hbm and hbm.memcpy else None, "TB/s")),
        ("L2 read", cell(l2.l2_read.tbs if l2 else None, "TB/s"), "— (no plain equivalent)",
         f"{l2.l2_over_hbm:.2f}x the HBM read" if l2 else "—"),
        ("H2D pinned", cell(links.h2d_pinned.gbs if links else None, "GB/s", 1),
         cell(torch_links[0].value if torch_links else None, "GB/s", 1) + " (`copy_(non_blocking=True)`)",
         f"PCIe {link_text} {pcie:.1f} GB/s" if pcie else "—"),
        ("D2H pinned", cell(links.d2h_pinned.gbs if links else None, "GB/s", 1),
         cell(torch_links[1].value if torch_links else None, "GB/s", 1) + " (`copy_(non_blocking=True)`)",
         f"PCIe {link_text} {pcie:.1f} GB/s" if pcie else "—"),
        ("launch, eager, per kernel", cell(launch.eager_us.median if launch else None, "us"),
         cell(torch_launch[0].value if torch_launch else None, "us") + " (`x.add_(1)`)", "issue 6: 5.1 us (CuPy)"),
        ("launch, CUDA graph replay, per kernel", cell(launch.graph_us.median if launch else None, "us"),
         cell(torch_launch[1].value if torch_launch else None, "us") + " (`torch.cuda.CUDAGraph`)",
         "issue 6: 0.70 us (CuPy)"),
    ]
    rows += [
        ("short kernel, highest-priority stream, GPU busy",
         cell(priority.high_us.median if priority and priority.high_us else None, "us", 1),
         cell(torch_priority[0].value if torch_priority else None, "us", 1) + " (`torch.cuda.Stream(priority=-1)`)",
         "equal priority: opgate " + cell(priority.equal_us.median if priority and priority.equal_us else None,
                                          "us", 1)
         + ", PyTorch " + cell(torch_priority[1].value if torch_priority else None, "us", 1)),
        ("event timer step", cell(events.timer_step_us if events else None, "us", 3),
         cell(torch_timer.value if torch_timer else None, "us", 3) + " (`torch.cuda.Event` around `_sleep`)",
         "CUDA docs: about 0.5 us; doctor goal <= 2.0 us"),
        ("events back to back, smallest interval", cell(events.smallest_step_us if events else None, "us"),
         cell(torch_events.value if torch_events else None, "us") + " (`torch.cuda.Event`)",
         "the front end's cost of one record (not judged)"),
    ]
    for pair, theirs in peers:
        rows.append((f"peer copy GPU {pair.src} -> GPU {pair.dst}", cell(pair.bandwidth_gbs, "GB/s", 1),
                     cell(theirs.value if theirs else None, "GB/s", 1) + " (`b.copy_(a)` across devices)",
                     "peer access " + ("enabled" if pair.can_access_peer else "not available")))
    print(f"{name}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{time.perf_counter() - started:.1f} s\n")
    print("| figure | opgate probe | PyTorch plain equivalent | reference |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if hbm and hbm.read_clocks:
        print(f"\nduring the HBM read (NVML): {hbm.read_clocks.summary()}")
    for note in notes:
        print(f"\nnot measured: {note}")
    if args.json:
        payload = {"device": name, "rows": rows, "notes": notes,
                   "hbm": hbm.to_dict() if hbm else None, "l2": l2.to_dict() if l2 else None,
                   "host_links": links.to_dict() if links else None,
                   "launch": launch.to_dict() if launch else None,
                   "stream_priority": priority.to_dict() if priority else None,
                   "event_timing": events.to_dict() if events else None,
                   "torch": {"hbm_read": torch_read.to_dict() if torch_read else None,
                             "host_copies": [f.to_dict() for f in torch_links] if torch_links else None,
                             "launch": [f.to_dict() for f in torch_launch] if torch_launch else None,
                             "stream_priority": [f.to_dict() for f in torch_priority] if torch_priority else None,
                             "event_timing": torch_events.to_dict() if torch_events else None,
                             "event_timer_step": torch_timer.to_dict() if torch_timer else None}}
        args.json.write_text(json.dumps(payload, indent=1))
    return 1 if notes else 0


if __name__ == "__main__":
    sys.exit(main())
