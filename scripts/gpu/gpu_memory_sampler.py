"""Who holds a GPU's memory during a run: NVML's per-process usage every few seconds, each process named by its role
(a verify warm worker, a calibration process, a sanitizer run, the verify parent), as JSON lines; `--summary` prints
each sample's totals by role and the largest holders at the sample with the least memory free.

    python3 scripts/gpu/gpu_memory_sampler.py --out gpu_memory.jsonl --every 5 &   # until killed
    python3 scripts/gpu/gpu_memory_sampler.py --summary gpu_memory.jsonl
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import sys
import time
from pathlib import Path


def role(pid: int) -> str:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    text = " ".join(a.decode(errors="replace") for a in args)
    if "opgate.engine.worker" in text:
        return "warm worker"
    if "multiprocessing" in text:
        return "calibration (spawned)"
    if "compute-sanitizer" in text or "opgate.verify.runtime" in text:
        return "sanitizer run"
    if "opgate" in text and "verify" in text:
        return "verify parent"
    return text[:60] or "unknown"


def sample() -> dict:
    import pynvml

    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    return {"t": round(time.time(), 1), "free_gib": round(memory.free / 2**30, 2),
            "total_gib": round(memory.total / 2**30, 2),
            "processes": [{"pid": p.pid, "gib": round((p.usedGpuMemory or 0) / 2**30, 3), "role": role(p.pid)}
                          for p in processes]}


def record(out: Path, every: float) -> None:
    import pynvml

    pynvml.nvmlInit()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with out.open("a") as sink:
        while True:
            sink.write(json.dumps(sample()) + "\n")
            sink.flush()
            time.sleep(every)


def summary(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        print("no samples")
        return
    start = rows[0]["t"]
    for row in rows[:: max(1, len(rows) // 40)]:
        by_role: dict[str, list[float]] = collections.defaultdict(list)
        for p in row["processes"]:
            by_role[p["role"]].append(p["gib"])
        parts = ", ".join(f"{r}: {len(v)} / {sum(v):.1f} GiB" for r, v in sorted(by_role.items()))
        print(f"{row['t'] - start:6.0f} s  free {row['free_gib']:5.1f} of {row['total_gib']:.0f} GiB  {parts}")
    tightest = min(rows, key=lambda r: r["free_gib"])
    print(f"least free: {tightest['free_gib']} GiB at {tightest['t'] - start:.0f} s; largest holders:")
    for p in sorted(tightest["processes"], key=lambda p: -p["gib"])[:12]:
        print(f"  pid {p['pid']}: {p['gib']:.2f} GiB, {p['role']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--every", type=float, default=5.0)
    parser.add_argument("--summary", type=Path)
    args = parser.parse_args()
    if args.summary:
        summary(args.summary)
    elif args.out:
        record(args.out, args.every)
    else:
        parser.error("give --out FILE (record) or --summary FILE")


if __name__ == "__main__":
    main()
