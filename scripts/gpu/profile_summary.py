"""Where the CPU went in a py-spy recording of an opgate run (py-spy record --subprocesses --format raw).

Each sample is one process's stack while it ran on a CPU (idle samples are not recorded without --idle), so the
counts over the sampling rate are CPU seconds. Prints, per process kind (from the command line), its seconds and
the functions with the most inclusive seconds, opgate's own frames and the libraries' leaf frames apart.

    python3 scripts/gpu/profile_summary.py b.prof --rate 10 [--top 25] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
from pathlib import Path

RECORD = re.compile(r"(.*?) (\d+)\n", re.S)
PROCESS = re.compile(r'^process \d+:"(.*)"$', re.S)


def kind_of(chain: list[str]) -> str:
    """The process kind from its chain of command lines, outermost first (the sampled process is the last)."""
    if any("compute-sanitizer" in cmd for cmd in chain):
        return "sanitized child"
    cmdline = chain[-1] if chain else "?"
    if "opgate.engine.worker" in cmdline or "opgate.checks.worker" in cmdline:
        return "check worker"
    if "multiprocessing" in cmdline or "spawn_main" in cmdline:
        return "spawned pool (calibration)"
    if "-m opgate verify" in cmdline or "opgate verify" in cmdline:
        return "opgate verify (parent)"
    if "opgate" in cmdline:
        return "other opgate: " + cmdline.split()[2] if len(cmdline.split()) > 2 else "other opgate"
    return "other: " + (cmdline.split() or ["?"])[0].rsplit("/", 1)[-1]


def read(path: Path) -> list[tuple[list[str], int]]:
    raw = gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()
    samples = []
    for match in RECORD.finditer(raw):
        frames = match.group(1).split(";")
        samples.append((frames, int(match.group(2))))
    return samples


def summarise(samples: list[tuple[list[str], int]], rate: float, top: int) -> dict:
    by_kind: collections.Counter[str] = collections.Counter()
    inclusive: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    leaves: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for frames, count in samples:
        procs = [PROCESS.match(f) for f in frames]
        kind = kind_of([m.group(1) for m in procs if m])
        python = [f for f, m in zip(frames, procs) if not m]
        by_kind[kind] += count
        for frame in set(f for f in python if "opgate" in f):
            inclusive[kind][frame] += count
        if python:
            leaves[kind][python[-1]] += count
    return {
        kind: {
            "cpu_s": round(total / rate, 1),
            "opgate_inclusive_s": [(f, round(c / rate, 1)) for f, c in inclusive[kind].most_common(top)],
            "leaf_s": [(f, round(c / rate, 1)) for f, c in leaves[kind].most_common(top)],
        }
        for kind, total in by_kind.most_common()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--rate", type=float, required=True, help="py-spy's --rate (samples per second)")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    summary = summarise(read(args.profile), args.rate, args.top)
    for kind, part in summary.items():
        print(f"== {kind}: {part['cpu_s']} CPU s")
        print("   opgate frames, inclusive:")
        for frame, seconds in part["opgate_inclusive_s"]:
            print(f"   {seconds:9.1f}  {frame}")
        print("   leaf frames:")
        for frame, seconds in part["leaf_s"]:
            print(f"   {seconds:9.1f}  {frame}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
