"""One operator's numerics under Triton's interpreter with the time budget's dry-run program counts and without
(OPGATE_INTERPRETER_PROGRAMS=0: the element model alone), alternating, in one run: each `opgate verify` run's wall,
its numerics checks' verdicts, the cases run and capped, and the cases stopped past their prediction.

    PYTHONPATH=src python benchmarks/interpreter_program_budget.py SPEC OP [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one_run(spec: str, op: str, programs: bool, folder: Path) -> dict:
    report = folder / f"{op}-{int(programs)}-{time.monotonic_ns()}.json"
    env = {**os.environ, "OPGATE_CACHE": "0", "TRITON_INTERPRET": "1",
           "OPGATE_INTERPRETER_PROGRAMS": "1" if programs else "0"}
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "opgate", "verify", spec, "--op", op, "--stages", "numerics",
                    "--jobs", "2", "--json", str(report)], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - began
    checks = [r for r in json.loads(report.read_text())["results"] if r.get("stage") == "numerics"
              and not r["check_id"].endswith(".calibration")]
    capped = [c for r in checks for c in (r["extra"].get("time_budget") or {}).get("capped", [])]
    return {"wall": wall, "verdicts": sorted(f"{r['check_id'].rsplit('.', 1)[-1]} {r['outcome']}" for r in checks),
            "run": sum(len(r["extra"].get("cases", [])) for r in checks), "capped": len(capped),
            "stopped": sum("stopped_after_s" in c for c in capped)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("op")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="opgate-programs-"))
    print(f"{'budget model':28} {'wall s':>7} {'cases run':>9} {'capped':>7} {'stopped':>8}  verdicts")
    for _ in range(args.rounds):
        for programs in (False, True):
            row = one_run(args.spec, args.op, programs, folder)
            name = "elements and programs" if programs else "elements only (naive)"
            print(f"{name:28} {row['wall']:7.1f} {row['run']:9d} {row['capped']:7d} {row['stopped']:8d}  "
                  f"{', '.join(row['verdicts'])}", flush=True)


if __name__ == "__main__":
    main()
