#!/usr/bin/env python3
"""Time `opgate inspect` against `cuobjdump --list-elf` on one big binary, side by side in one run.

Each command runs as a child process; wall time is measured around it and peak RSS comes from that
child's own rusage (os.wait4), so the numbers are per command. Prints a Markdown table.

    PYTHONPATH=src python benchmarks/inspect_vs_cuobjdump.py /path/to/libtorch_cuda.so [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from opgate.inspect.listing import find_cuobjdump  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def measure(command: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS MiB, exit code, stdout) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode, out.decode(errors="replace")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cuobjdump")
    args = parser.parse_args(argv)
    tool = find_cuobjdump(args.cuobjdump)
    if tool is None:
        print("cuobjdump not found: install nvidia-cuda-cuobjdump or pass --cuobjdump", file=sys.stderr)
        return 2
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
               COLUMNS="200")
    listing_code = ("import sys; from pathlib import Path; from opgate.inspect.sources import inspect_paths; "
                    "from opgate.inspect.listing import cuobjdump_lines; "
                    "[print(l) for r in inspect_paths([Path(sys.argv[1])]) for l in cuobjdump_lines(r, 'sass')]")
    commands = {
        "cuobjdump --list-elf": [tool, "--list-elf", str(args.binary)],
        "opgate inspect (CLI, tables)": [sys.executable, "-m", "opgate", "inspect", str(args.binary)],
        "opgate listing (library call)": [sys.executable, "-c", listing_code, str(args.binary)],
    }
    # one warm-up each, so the page cache holds the file for every tool alike
    outputs = {name: measure(cmd, env)[3] for name, cmd in commands.items()}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(args.repeat):
        for name, command in commands.items():
            wall, rss, code, _ = measure(command, env)
            if code not in (0, 1):
                print(f"{name} exited {code}", file=sys.stderr)
            results[name].append((wall, rss))
    size_mb = args.binary.stat().st_size / 1e6
    elf_lines = [line for line in outputs["cuobjdump --list-elf"].splitlines() if line.startswith("ELF file")]
    ours = [line for line in outputs["opgate listing (library call)"].splitlines() if line.startswith("ELF file")]
    version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    print(f"binary: {args.binary} ({size_mb:.1f} MB), {len(elf_lines)} cubins listed by cuobjdump, "
          f"listings {'identical' if elf_lines == ours else 'DIFFERENT'}")
    print(f"host: {platform.node()} ({os.cpu_count()} CPUs), Python {platform.python_version()}, cuobjdump {version}; "
          f"median of {args.repeat} runs after one warm-up\n")
    base_wall = statistics.median(w for w, _ in results["cuobjdump --list-elf"])
    base_rss = max(r for _, r in results["cuobjdump --list-elf"])
    print("| command | wall s (median) | wall s (min-max) | peak RSS MiB | speed-up | memory ratio |")
    print("|---|---|---|---|---|---|")
    for name, runs in results.items():
        walls = [w for w, _ in runs]
        rss = max(r for _, r in runs)
        median = statistics.median(walls)
        print(f"| {name} | {median:.3f} | {min(walls):.3f}-{max(walls):.3f} | {rss:.0f} | "
              f"{base_wall / median:.1f}x | {rss / base_rss:.2f} |")
    return 0 if elf_lines == ours else 1


if __name__ == "__main__":
    sys.exit(main())
