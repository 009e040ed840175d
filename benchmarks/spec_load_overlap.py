"""verify's spec load (verify/engine._load_specs: the pre-flight child imports the specs, then this process does),
three ways in one run, each in a fresh process, alternated, twice each: this process importing only torch while the
child runs (before 2026-12-05); torch plus the packages the specs import at their top level from a site-packages or
dist-packages folder (before 2026-12-07); torch plus every package an installed distribution provides, wherever pip
put it (specload.installed_imports, now). The last two differ where a package was installed with
`pip install --target DIR` and DIR is on PYTHONPATH (the GPU library runs' wheels in /tmp/site).

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
elif sys.argv[1].startswith("site-packages"):
    import importlib.util
    every = specload.installed_imports
    def in_site_packages(name):
        spec = importlib.util.find_spec(name.split(".")[0])
        origin = (spec.origin or "") if spec is not None else ""
        return "site-packages" in origin or "dist-packages" in origin
    specload.installed_imports = lambda paths: [name for name in every(paths) if in_site_packages(name)]
files = [Path(p) for p in sys.argv[2:]]
began = time.perf_counter()
ops, _ = engine._load_specs(engine.VerifyRequest(spec_file=files[0], spec_files=files))
print(f"{time.perf_counter() - began:.2f} {len(ops)}")
"""


def main() -> None:
    files = sys.argv[1:]
    if not files:
        sys.exit("usage: python benchmarks/spec_load_overlap.py SPEC.py [SPEC.py ...]")
    print(f"{len(files)} spec files\n{'imported here meanwhile':36} {'spec load s':>11} {'operators':>9}")
    ways = ("torch only", "site-packages folders only (before)", "every installed distribution (now)")
    for way in ways * 2:
        out = subprocess.run([sys.executable, "-c", ONE_LOAD, way, *files], capture_output=True, text=True, check=True)
        seconds, operators = out.stdout.split()[-2:]
        print(f"{way:36} {float(seconds):11.2f} {operators:>9}")


if __name__ == "__main__":
    main()
