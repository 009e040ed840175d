"""verify's spec load (verify/engine._load_specs: the pre-flight child imports the specs, then this process does),
two ways in one run, each in a fresh process: this process importing only torch while the child runs (before
2026-12-05), and torch plus every installed package the specs import at their top level
(specload.installed_imports, now). Alternated, twice each.

    PYTHONPATH=src python benchmarks/spec_load_overlap.py SPEC.py [SPEC.py ...]
"""

from __future__ import annotations

import subprocess
import sys

ONE_LOAD = """
import sys, time
from pathlib import Path
from opgate.engine import specload
from opgate.verify import engine
if sys.argv[1] == "torch only":
    specload.installed_imports = lambda paths: []
files = [Path(p) for p in sys.argv[2:]]
began = time.perf_counter()
ops, _ = engine._load_specs(engine.VerifyRequest(spec_file=files[0], spec_files=files))
print(f"{time.perf_counter() - began:.2f} {len(ops)}")
"""


def main() -> None:
    files = sys.argv[1:]
    if not files:
        sys.exit("usage: python benchmarks/spec_load_overlap.py SPEC.py [SPEC.py ...]")
    print(f"{len(files)} spec files\n{'imported here meanwhile':34} {'spec load s':>11} {'operators':>9}")
    for way in ("torch only", "torch and the installed imports") * 2:
        out = subprocess.run([sys.executable, "-c", ONE_LOAD, way, *files], capture_output=True, text=True, check=True)
        seconds, operators = out.stdout.split()[-2:]
        print(f"{way:34} {float(seconds):11.2f} {operators:>9}")


if __name__ == "__main__":
    main()
