"""Where a run's CPU time goes, by kind of process: samples /proc every second and keeps, per process, its CPU
seconds: its own, and apart from them its waited-for children's (ptxas runs, too short to sample, show up there,
in the Triton process that started them; a parent's waited-for children are counted twice if they were sampled).

    python3 scripts/gpu/cpu_by_process.py OUT.json &   # sample until killed; OUT.json is rewritten every 5 s
    python3 scripts/gpu/cpu_by_process.py --summary OUT.json

A process's kind comes from its command line (KINDS, first match). Linux only; the device scripts run it beside a
library run (library_default.sh, CPU_LOG=...).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
KINDS: tuple[tuple[str, str], ...] = (
    ("compute-sanitizer", "sanitizer tool"),
    ("opgate.verify.sanitizer_batch", "sanitized child (shared)"),
    ("opgate.verify.runtime", "sanitized or profiled child"),
    ("ptxas", "ptxas"),
    ("opgate.engine.worker", "check worker"),
    ("multiprocessing.spawn", "spawned pool (calibration)"),
    ("multiprocessing.forkserver", "spawned pool (calibration)"),
    ("-m opgate verify", "opgate verify (parent)"),
    ("opgate", "other opgate"),
)


def kind_of(cmdline: str) -> str:
    for needle, kind in KINDS:
        if needle in cmdline:
            return kind
    return "other"


def sample(seen: dict[str, dict[str, object]]) -> None:
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        # fields[11..14] are utime, stime, cutime, cstime (proc(5), counting from field 3)
        own_s = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        children_s = (int(fields[13]) + int(fields[14])) / CLOCK_TICKS
        key = f"{entry.name}:{fields[19]}"  # pid and start time: a reused pid is another process
        record = seen.setdefault(key, {"cmd": cmdline[:300], "kind": kind_of(cmdline), "cpu_s": 0.0,
                                       "children_s": 0.0, "first": time.time()})
        record["cpu_s"] = max(float(record["cpu_s"]), own_s)  # type: ignore[arg-type]
        record["children_s"] = max(float(record["children_s"]), children_s)  # type: ignore[arg-type]
        record["last"] = time.time()


def kind_totals(seen: dict[str, dict[str, object]]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for record in seen.values():
        kind = str(record["kind"])
        totals[kind] = round(totals.get(kind, 0.0) + float(record["cpu_s"]), 1)  # type: ignore[arg-type]
    return totals


def write(path: Path, seen: dict[str, dict[str, object]], series: list[object]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"processes": seen, "series": series}))
    os.replace(tmp, path)


def summary(path: Path) -> None:
    data = json.loads(path.read_text())
    seen, series = data["processes"], data["series"]
    totals: dict[str, list[float]] = {}
    waited: dict[str, float] = {}
    for record in seen.values():
        totals.setdefault(record["kind"], []).append(record["cpu_s"])
        waited[record["kind"]] = waited.get(record["kind"], 0.0) + record["children_s"]
    start = min(r["first"] for r in seen.values())
    end = max(r["last"] for r in seen.values())
    print(f"{len(seen)} processes over {end - start:.0f} s")
    print(f"{'kind':32} {'processes':>9} {'own cpu s':>9} {'max s':>8} {'waited children s':>18}")
    for kind, values in sorted(totals.items(), key=lambda kv: -sum(kv[1])):
        print(f"{kind:32} {len(values):9d} {sum(values):9.0f} {max(values):8.0f} {waited[kind]:18.0f}")
    kinds = sorted(totals, key=lambda kind: -sum(totals[kind]))
    print("cores busy per 30 s window, by kind:")
    print(f"{'s':>5} " + " ".join(f"{kind[:14]:>14}" for kind in kinds))
    previous: tuple[float, dict[str, float]] | None = None
    for t, by_kind in series:
        if previous is None or t - previous[0] >= 30:
            if previous is not None:
                span = t - previous[0]
                print(f"{t - series[0][0]:5.0f} " + " ".join(
                    f"{(by_kind.get(k, 0.0) - previous[1].get(k, 0.0)) / span:14.1f}" for k in kinds))
            previous = (t, by_kind)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--summary"]:
        summary(Path(argv[1]))
        return
    out = Path(argv[0])
    seen: dict[str, dict[str, object]] = {}
    series: list[object] = []  # [time, {kind: CPU seconds so far}] every 5 s: where the cores went, when
    last_write = 0.0
    while True:
        sample(seen)
        if time.time() - last_write > 5:
            series.append([round(time.time(), 1), kind_totals(seen)])
            write(out, seen, series)
            last_write = time.time()
        time.sleep(1.0)


if __name__ == "__main__":
    main(sys.argv[1:])
