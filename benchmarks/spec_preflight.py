"""The spec files' pre-flight imports, two ways in one run: one child per file side by side in threads (before
2026-12-02) and one child importing every file in order (specload.preflight_specs, now).

    PYTHONPATH=src python benchmarks/spec_preflight.py SPEC.py [SPEC.py ...]
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor

from opgate.engine.specload import preflight_spec, preflight_specs


def one_child_per_file(files: list[str]) -> None:
    with ThreadPoolExecutor(max_workers=len(files)) as pool:
        list(pool.map(lambda path: preflight_spec(path, 300.0), files))


def one_child_for_all(files: list[str]) -> None:
    preflight_specs(files, 300.0)


def main() -> None:
    files = sys.argv[1:]
    if not files:
        sys.exit("usage: python benchmarks/spec_preflight.py SPEC.py [SPEC.py ...]")
    print(f"{len(files)} spec files")
    print(f"{'pre-flight':28} {'wall s':>7}")
    for name, way in (("one child per file", one_child_per_file), ("one child for all", one_child_for_all),
                      ("one child per file (again)", one_child_per_file), ("one child for all (again)", one_child_for_all)):
        began = time.perf_counter()
        way(files)
        print(f"{name:28} {time.perf_counter() - began:7.1f}")


if __name__ == "__main__":
    main()
