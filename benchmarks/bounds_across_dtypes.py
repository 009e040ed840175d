"""How far one case's accumulation bound (the reverse passes: most of a calibration's time) moves between dtypes.

    PYTHONPATH=src python benchmarks/bounds_across_dtypes.py SPEC.py OP [--budget standard] [--dtypes float32,float16,bfloat16]

Every dtype's bound uses float32's unit roundoff (error_bounds.ACCUMULATION_ROUNDOFF: the accumulation type), so the
dtypes of one case differ only in their inputs' rounding to the dtype and in which elements their truths sample.
For each case this computes error_bounds.accumulation_bounds in every dtype (on the CPU, nothing cached), and prints,
against the first dtype: the RMS and p99.9 figures' ratio per output, how many sampled element indices the two share,
and the seconds each took. Sharing one dtype's bound terms with the others would save the others' time; this says what
the budgets would then lose or gain. Nothing here changes a verdict.
"""

from __future__ import annotations

import argparse
import math
import sys
import time


def ratio(a: float, b: float) -> float:
    if a == b:
        return 1.0
    if a == 0.0 or b == 0.0 or not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return b / a


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("op")
    parser.add_argument("--budget", default="standard")
    parser.add_argument("--dtypes", default="", help="comma-separated; default: the operator's, float32 first")
    args = parser.parse_args(argv)

    from opgate.verify.calibrate import truth_and_baseline
    from opgate.verify.error_bounds import accumulation_bounds
    from opgate.verify.inputs import make_inputs, plan_cases
    from opgate.model.errors import InputError
    from opgate.verify.loaded_specs import loaded_operator

    try:
        op = loaded_operator(args.spec, args.op)
    except InputError as exc:
        print(exc, file=sys.stderr)
        return 2
    dtypes = [d for d in args.dtypes.split(",") if d] or sorted(op.dtypes, key=lambda d: d != "float32")
    cases = plan_cases(op, args.budget, 0)
    print(f"{args.op}: {len(cases)} cases, dtypes {dtypes} (ratios against {dtypes[0]})")
    print(f"{'case':48s} {'dtype':9s} {'rms ratio':>19s} {'p99.9 ratio':>19s} {'shared samples':>14s} {'s, cum.':>8s}")
    seconds = {d: 0.0 for d in dtypes}
    worst = {d: 1.0 for d in dtypes}
    for case in cases:
        found = {}
        for dtype in dtypes:
            truth, _ = truth_and_baseline(op, case, dtype)
            inputs = make_inputs(op, case, dtype).truth
            began = time.perf_counter()
            found[dtype] = accumulation_bounds(op.reference, inputs, truth, dtype, case.seed)
            seconds[dtype] += time.perf_counter() - began
        first = found[dtypes[0]]
        for dtype in dtypes[1:]:
            rms = [ratio(a.rmse, b.rmse) for a, b in zip(first, found[dtype]) if a.present or b.present]
            q = [ratio(a.quantile, b.quantile) for a, b in zip(first, found[dtype]) if a.present or b.present]
            shared = sum(len({e.index for e in a.elements} & {e.index for e in b.elements})
                         for a, b in zip(first, found[dtype]))
            total = sum(len(a.elements) for a in first)
            for value in rms + q:
                worst[dtype] = max(worst[dtype], value, 1.0 / value if value else math.inf)
            span = lambda values: f"{min(values):.4f}-{max(values):.4f}" if values else "-"  # noqa: E731
            print(f"{case.label()[:48]:48s} {dtype:9s} {span(rms):>19s} {span(q):>19s} "
                  f"{f'{shared}/{total}':>14s} {seconds[dtype]:8.1f}")
    print("seconds of accumulation bounds per dtype: " + ", ".join(f"{d} {s:.1f}" for d, s in seconds.items()))
    print("largest factor between a dtype's figure and the first's: "
          + ", ".join(f"{d} {worst[d]:.3g}" for d in dtypes[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
