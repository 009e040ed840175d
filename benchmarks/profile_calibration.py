"""One operator x dtype's calibration (truths, bound terms, budgets) under cProfile, nothing cached or deferred.

    PYTHONPATH=src python benchmarks/profile_calibration.py SPEC.py OP DTYPE [--gpu] [--top 30] [--prof FILE]

Prints the calibration's phases and the functions by cumulative and by own time. `--gpu`: as a verify run on a
GPU host calibrates (the bound terms of large cases on the GPU, verify/bounds_device.py).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("op")
    parser.add_argument("dtype")
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--budget", default="standard")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--prof", type=Path, help="also write the raw profile here")
    args = parser.parse_args(argv)
    os.environ["OPGATE_CACHE"] = "0"  # every bound term computed
    os.environ.setdefault("OPGATE_DEFER_BOUNDS_S", "0")  # and none deferred

    from opgate.verify.calibrator import calibrate_plan
    from opgate.verify.inputs import plan_cases
    from opgate.model.errors import InputError
    from opgate.verify.loaded_specs import loaded_operator

    try:
        op = loaded_operator(args.spec, args.op)
    except InputError as exc:
        print(exc, file=sys.stderr)
        return 2
    cases = plan_cases(op, args.budget, 0)
    profile = cProfile.Profile()
    began, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        profile.enable()
        outcome = calibrate_plan(op, args.dtype, cases, lambda: [], args.budget, 0, Path(tmp) / "plan.json",
                                 gpu=args.gpu)
        profile.disable()
    print(f"{args.op} {args.dtype}: {len(cases)} cases, wall {time.perf_counter() - began:.1f} s, "
          f"CPU {time.process_time() - cpu:.1f} s, phases {outcome.phases}, bound terms {outcome.cache}")
    if args.prof:
        profile.dump_stats(str(args.prof))
    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
