"""How close do pinned host<->GPU copies get to the PCIe link, by method? (issue 6 goal: >= 90% of gen x width)

Times cudaMemcpyAsync H2D and D2H with CUDA events for: transfer sizes 64 MiB .. 1 GiB; pinned memory
allocated portable (what `opgate doctor` uses), portable + write-combined, malloc'd memory pinned with
cudaHostRegister, and 2 MiB-aligned memory backed by transparent huge pages pinned with cudaHostRegister (fewer
IOMMU translations per byte, in case those limit the link); one stream, or the transfer split over two streams. Prints each figure as GB/s and as a
share of the link's raw rate (NVML generation x width under load) and of the ceiling the GPU's Max_Payload_Size
leaves (read from its PCI Express capability by opgate.gpu.probes.pcie_config, as the doctor does: TLP overhead per
payload bounds the usable share).

    PYTHONPATH=src python3 benchmarks/host_copy_methods.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from opgate.gpu.probes.device import nvml_handle_for  # noqa: E402
from opgate.gpu.probes.pcie import payload_ceiling_fraction, pcie_theoretical_gbs  # noqa: E402
from opgate.gpu.probes.pcie_config import PcieConfigError, read_express_facts  # noqa: E402
from opgate.gpu.probes.timing import bandwidth_gbs  # noqa: E402
from opgate.gpu.probes.timing import time_on_stream  # noqa: E402

MiB = 1 << 20


def payload_ceilings(bus_id: str, generation: int) -> tuple[int | None, dict[str, float | None], str]:
    """(Max_Payload_Size, {direction: fraction of the raw rate full packets leave}, note) for the GPU."""
    try:
        facts = read_express_facts(bus_id)
    except PcieConfigError as exc:
        return None, {"H2D": None, "D2H": None}, f"payload size not read: {exc}"
    mps = facts.max_payload_bytes
    return mps, {d: payload_ceiling_fraction(generation, mps, d) for d in ("H2D", "D2H")}, f"Max_Payload_Size {mps} B"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--reps", type=int, default=8)
    args = parser.parse_args()

    import cupy
    import numpy as np
    import pynvml

    started = time.perf_counter()
    runtime = cupy.cuda.runtime
    pynvml.nvmlInit()
    bus_id = str(cupy.cuda.Device(0).pci_bus_id)
    handle = nvml_handle_for(pynvml, bus_id)
    sizes = [64 * MiB, 256 * MiB, 1024 * MiB]
    biggest = sizes[-1]
    dev = cupy.empty(biggest, dtype=cupy.uint8)
    s1, s2 = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)

    hosts: dict[str, int] = {
        "portable": int(runtime.hostAlloc(biggest, runtime.hostAllocPortable)),
        "portable+writecombined": int(runtime.hostAlloc(biggest, runtime.hostAllocPortable
                                                        | runtime.hostAllocWriteCombined)),
    }
    registered = np.ones(biggest, dtype=np.uint8)
    runtime.hostRegister(registered.ctypes.data, biggest, 0)
    hosts["malloc+cudaHostRegister"] = registered.ctypes.data
    huge_map, huge_ptr, huge_note = _huge_page_buffer(biggest)
    runtime.hostRegister(huge_ptr, biggest, 0)
    hosts["hugepages+cudaHostRegister"] = huge_ptr
    print(f"transparent huge pages: {huge_note}")

    rows: list[dict[str, Any]] = []
    gen = width = 0
    for kind, host in hosts.items():
        for n in sizes:
            for direction in ("H2D", "D2H"):
                for streams in (1, 2):
                    def copy(n: int = n, host: int = host, direction: str = direction, streams: int = streams) -> None:
                        _fork_join(cupy, s1, s2, n, host, dev.data.ptr, direction, streams)

                    samples = time_on_stream(cupy, s1, copy, warmup=2, reps=args.reps)
                    gen = max(gen, int(pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)))
                    width = max(width, int(pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle)))
                    gbs = bandwidth_gbs(n, samples.median)
                    rows.append({"memory": kind, "bytes": n, "direction": direction, "streams": streams,
                                 "gbs": gbs, "spread": samples.relative_spread})
    raw = pcie_theoretical_gbs(gen, width)
    mps, ceilings, payload_note = payload_ceilings(bus_id, gen)
    print(f"GPU 0 at {bus_id}, link under load: Gen{gen} x{width} = {raw:.1f} GB/s per direction (raw); "
          f"{payload_note}" + "".join(f"; {d} ceiling {100 * f:.1f}% of raw" for d, f in ceilings.items() if f))
    print(f"{'memory':26s} {'size':>8s} {'dir':4s} {'streams':>7s} {'GB/s':>7s} {'of raw':>7s} {'of ceiling':>10s}")
    for row in rows:
        row["of_raw"] = row["gbs"] / raw
        ceiling = ceilings[row["direction"]]
        row["of_ceiling"] = row["of_raw"] / ceiling if ceiling else None
        print(f"{row['memory']:26s} {row['bytes'] // MiB:6d}Mi {row['direction']:4s} {row['streams']:7d} "
              f"{row['gbs']:7.1f} {100 * row['of_raw']:6.1f}% "
              + (f"{100 * row['of_ceiling']:9.1f}%" if row["of_ceiling"] else f"{'-':>10s}"))
    best = max(rows, key=lambda r: r["of_raw"])
    print(f"best: {best['memory']} {best['bytes'] // MiB} MiB {best['direction']} x{best['streams']} streams "
          f"{best['gbs']:.1f} GB/s = {100 * best['of_raw']:.1f}% of raw; took {time.perf_counter() - started:.1f} s")
    runtime.hostUnregister(registered.ctypes.data)
    runtime.hostUnregister(huge_ptr)
    del huge_map
    if args.json:
        args.json.write_text(json.dumps({"bus_id": bus_id, "max_payload_bytes": mps, "generation": gen, "width": width,
                                         "raw_gbs": raw, "huge_pages": huge_note, "rows": rows}, indent=1))
    return 0


def _huge_page_buffer(n: int) -> tuple[Any, int, str]:
    """n bytes of anonymous memory 2 MiB-aligned, advised MADV_HUGEPAGE before first touch, then filled; returns
    (the mapping to keep alive, the aligned address, how many huge pages the kernel actually gave)."""
    import ctypes
    import mmap

    huge = 2 * MiB
    mapping = mmap.mmap(-1, n + huge)
    mapping.madvise(mmap.MADV_HUGEPAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
    aligned = (base + huge - 1) & ~(huge - 1)
    ctypes.memset(aligned, 1, n)  # first touch, after the advice
    rollup = Path("/proc/self/smaps_rollup")
    anon_huge = next((line.split()[1] for line in rollup.read_text().splitlines()
                      if line.startswith("AnonHugePages:")), "?") if rollup.exists() else "?"
    enabled = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    mode = enabled.read_text().strip() if enabled.exists() else "unknown"
    return mapping, aligned, f"THP mode {mode}; process AnonHugePages {anon_huge} kB after filling {n // MiB} MiB"


def _fork_join(cupy: Any, s1: Any, s2: Any, n: int, host: int, device_ptr: int, direction: str,
               streams: int) -> None:
    """Copy n bytes split over `streams` streams; s2 starts after s1's work so far and s1 waits for s2, so
    events recorded on s1 around this call time both halves."""
    runtime = cupy.cuda.runtime
    if streams == 2:
        fork = cupy.cuda.Event()
        fork.record(s1)
        s2.wait_event(fork)
    part = n // streams
    for k, stream in enumerate((s1, s2)[:streams]):
        if direction == "H2D":
            runtime.memcpyAsync(device_ptr + k * part, host + k * part, part, runtime.memcpyHostToDevice, stream.ptr)
        else:
            runtime.memcpyAsync(host + k * part, device_ptr + k * part, part, runtime.memcpyDeviceToHost, stream.ptr)
    if streams == 2:
        join = cupy.cuda.Event()
        join.record(s2)
        s1.wait_event(join)


if __name__ == "__main__":
    sys.exit(main())
