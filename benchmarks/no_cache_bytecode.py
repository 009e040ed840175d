"""`opgate verify SPEC --no-cache` where the installed modules carry no bytecode and Python may not write it, two
source trees alternating in one run: OLD (its --no-cache runs share bytecode in the run's temporary folder, compiled
again every run) and this checkout (opgate's cache folder, warm from the second run on). The process wall and the
process's age when the checks start, per run.

    PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=<a torch copy without __pycache__> \\
        python benchmarks/no_cache_bytecode.py --old OLD/src [--spec examples/ops/softmax.py] [--rounds 2]

The first run of this checkout is not measured: it fills the cache folder, as a first run anywhere does.
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

SRC = Path(__file__).resolve().parents[1] / "src"


def one_run(src: Path, spec: str, cache: Path, folder: Path) -> tuple[float, float, str]:
    """(process wall s, process age at the checks s, the report's bytecode line) of one --no-cache run."""
    report = folder / f"run-{time.monotonic_ns()}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]),
           "OPGATE_CACHE_DIR": str(cache)}
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "opgate", "verify", spec, "--no-cache", "--stages", "numerics",
                    "--json", str(report), "--out", str(folder / "out")], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - began
    engine = json.loads(report.read_text())["extra"]["engine"]
    return wall, float(engine.get("process_age_at_checks_s", 0.0)), str(engine.get("bytecode", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="an older checkout's src/ (with its pyproject.toml "
                                                                  "one level up)")
    parser.add_argument("--spec", default="examples/ops/softmax.py")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="opgate-bytecode-bench-") as tmp:
        folder, cache = Path(tmp), Path(tmp) / "cache"
        one_run(SRC, args.spec, cache, folder)  # fills the cache folder
        print(f"{'run':6} {'tree':5} {'wall':>7} {'age at checks':>14}  bytecode")
        for round_ in range(1, args.rounds + 1):
            for name, src in (("old", args.old), ("now", SRC)):
                wall, age, where = one_run(src, args.spec, cache, folder)
                print(f"{round_:<6} {name:5} {wall:6.1f}s {age:13.1f}s  {where.replace(tmp, '$TMP')}")


if __name__ == "__main__":
    main()
