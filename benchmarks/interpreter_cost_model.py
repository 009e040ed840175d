"""What a case costs under Triton's interpreter, against two predictors in one run: the elements of its inputs (the
time budget's size model, verify/time_budget.py CaseTimer) and the Triton programs its kernels launch (counted by
verify/backends/interpreter_programs.py, which wraps the interpreter's grid executor). Every distinct shape and
layout of an operator's case plan is run once, in plan order, after a warm-up call at the first declared size; each
predictor is scaled by the median seconds per unit over the cases, and the table shows how far off that scaling puts
each case. Before each case runs, a dry run of the implementation counts the programs its launches would start
without running them (what the time budget now knows before a case runs), and the last line says whether the counts
match.

    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/interpreter_cost_model.py SPEC OP IMPL [--dtype float32]
        [--budget standard] [--limit 12] [--max-elements 65536]

The plan's cases take as long here as in a verify run: --limit keeps the first N shapes (the declared ones first),
--max-elements leaves out the larger ones.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("op")
    parser.add_argument("impl")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--budget", default="standard")
    parser.add_argument("--limit", type=int, default=12)
    parser.add_argument("--max-elements", type=int, default=1 << 16)
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("set TRITON_INTERPRET=1 (this measures Triton's interpreter)")
    from pathlib import Path
    import tempfile

    from opgate.verify.backends import prepare
    import torch

    from opgate.verify.backends.base import find_choice, implementation_function
    from opgate.verify.compile_ahead import distinct_shapes
    from opgate.verify.inputs import apply_layout, case_input_elements, make_inputs, plan_cases
    from opgate.verify.loaded_specs import loaded_operator

    op = loaded_operator(str(Path(args.spec).resolve()), args.op)
    choice = find_choice(op, args.impl)
    prepared = prepare(choice, op, args.dtype, Path(tempfile.mkdtemp()))
    function = implementation_function(op, choice)
    from opgate.verify.backends import interpreter_programs

    if not interpreter_programs.install():
        raise SystemExit("this Triton has no interpreter grid executor to count launches with")
    cases = plan_cases(op, args.budget, 0)
    distinct = distinct_shapes(cases, lambda case: 0)
    shapes = [case for case in cases if case in distinct
              and case_input_elements(op, case) <= args.max_elements][:args.limit]
    warm = make_inputs(op, shapes[0], args.dtype)
    prepared.run(warm.values, warm.layout_applied, [])  # first-call costs (imports, the interpreter's set-up)
    rows, dry_runs = [], []
    for case in shapes:
        generated = make_inputs(op, case, args.dtype)
        values = [apply_layout(v, layout) if isinstance(v, torch.Tensor) else v
                  for v, layout in zip(generated.values, generated.layout_applied)]

        def call() -> None:  # one call, not prepared.run: that calls again when an output holds NaN, as unwritten
            with torch.no_grad():  # outputs do in a dry run
                function(*values)

        began = time.perf_counter()
        dry = interpreter_programs.dry_count(call)  # the wrapper alone, its launches counted and not run
        dry_runs.append((-1 if dry is None else dry, time.perf_counter() - began))
        if dry is None:  # a wrapper that reads what a kernel wrote
            print(f"dry run of {case.label()} raised")
        began = time.perf_counter()
        with interpreter_programs.counting() as ran:
            prepared.run(generated.values, generated.layout_applied, [])
        rows.append((case.label(), case_input_elements(op, case), ran["programs"], time.perf_counter() - began))
    per_element = statistics.median(seconds / max(elements, 1) for _, elements, _, seconds in rows)
    per_program = statistics.median(seconds / max(programs, 1) for _, _, programs, seconds in rows)
    print(f"{'case':52} {'elements':>9} {'programs':>9} {'seconds':>8} {'by elements':>12} {'by programs':>12}"
          f" {'dry run':>8}")
    for (label, elements, programs, seconds), (dry, _) in zip(rows, dry_runs):
        print(f"{label[:52]:52} {elements:9d} {programs:9d} {seconds:8.2f} {seconds / (per_element * elements):11.2f}x"
              f" {seconds / (per_program * max(programs, 1)):11.2f}x {dry:8d}")
    spread = {name: max(max(r), 1 / min(r)) for name, r in (
        ("elements", [s / (per_element * e) for _, e, _, s in rows]),
        ("programs", [s / (per_program * max(p, 1)) for _, _, p, s in rows]))}
    print(f"worst factor off: by elements {spread['elements']:.1f}x, by programs {spread['programs']:.1f}x")
    same = sum(dry == row[2] for (dry, _), row in zip(dry_runs, rows))
    print(f"dry runs (launches counted, not run): {same}/{len(rows)} counted the programs the case ran, in "
          f"{sum(seconds for _, seconds in dry_runs):.2f} s in all against {sum(r[3] for r in rows):.1f} s of runs")


if __name__ == "__main__":
    main()
