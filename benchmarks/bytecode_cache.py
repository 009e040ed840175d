"""What a verify child's imports cost with the environment's bytecode settings and with opgate's shared bytecode
folder (engine/bytecode.py), side by side in one run: N fresh interpreters each, one after another, CPU seconds
(user + system) and wall seconds per process.

    PYTHONPATH=src python benchmarks/bytecode_cache.py [--import "import torch"] [--processes 4] [--json OUT.json]

The "as set" column runs the children as the environment says (PYTHONDONTWRITEBYTECODE as it is); the "shared"
column runs them inside engine/bytecode.shared_bytecode with a new folder, the first child writing the bytecode and
the others reading it. Where the modules ship their bytecode, or Python may write it, the two columns are the same
code path, and the report says so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def children_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_children(statement: str, processes: int) -> list[tuple[float, float]]:
    """(wall s, CPU s) of each fresh interpreter running `statement`."""
    out = []
    for _ in range(processes):
        wall, cpu = time.perf_counter(), children_seconds()
        subprocess.run([sys.executable, "-c", statement], check=True, env=dict(os.environ))
        out.append((time.perf_counter() - wall, children_seconds() - cpu))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--import", dest="statement", default="import torch")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)

    from opgate.engine.bytecode import shared_bytecode

    as_set = run_children(args.statement, args.processes)
    with tempfile.TemporaryDirectory(prefix="opgate-bytecode-bench-") as tmp:
        with shared_bytecode(Path(tmp) / "bytecode") as decided:
            shared = run_children(args.statement, args.processes)
    print(f"{args.statement!r}: {args.processes} fresh interpreters each; "
          f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '(unset)')}; shared folder: {decided}")
    print(f"{'process':>8} {'as set: wall s':>15} {'CPU s':>7} {'shared: wall s':>15} {'CPU s':>7}")
    for k, ((w1, c1), (w2, c2)) in enumerate(zip(as_set, shared), start=1):
        print(f"{k:8d} {w1:15.2f} {c1:7.2f} {w2:15.2f} {c2:7.2f}")
    total = lambda rows: sum(c for _, c in rows)  # noqa: E731
    print(f"{'total':>8} {'':15} {total(as_set):7.2f} {'':15} {total(shared):7.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"statement": args.statement, "decided": decided,
                                               "as_set": as_set, "shared": shared}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
