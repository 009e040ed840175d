"""The large cases' bound terms on one CPU thread, beside what a GPU library run's report says they cost there.

    PYTHONPATH=src python benchmarks/bound_terms_large_cases.py [--report RUN.json] SPEC.py:OP:DTYPE ...

For each plan: its cases with at least bounds_device.MIN_GPU_ELEMENTS float64 input elements (those a GPU run put on
the GPU by size until the forty-fourth session; OPGATE_BOUNDS_DEVICE=size still does), their bound terms (calibrate.CaseBounds._computed) timed on the CPU with one torch thread (a
calibration process's share of a busy host), one reference call's CPU time per case (the placement rule now:
a call of at least SLOW_REFERENCE_S moves the case), and, from --report, the
milliseconds a case the run's GPU took for that plan (extra.engine.calibration_bounds_cache). The GPU's figure is
over the plan's cases that went there, measured beside the run's other work; the CPU's here over the large cases,
on this machine: the same cases, not the same host. Nothing is cached; no verdict changes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plans", nargs="+", help="SPEC.py:OP:DTYPE")
    parser.add_argument("--report", type=Path, help="a GPU run's JSON report, for its terms a case on the GPU")
    parser.add_argument("--budget", default="standard")
    args = parser.parse_args(argv)
    wanted = []
    for item in args.plans:
        parts = item.rsplit(":", 2)
        if len(parts) != 3 or not parts[0].endswith(".py"):
            print(f"bound_terms_large_cases.py: {item!r}: give SPEC.py:OP:DTYPE", file=sys.stderr)
            return 2
        wanted.append(parts)
    on_gpu: dict[str, dict] = {}
    if args.report:
        try:
            report = json.loads(args.report.read_text())
        except (OSError, ValueError) as exc:
            print(f"bound_terms_large_cases.py: --report {args.report}: {exc}", file=sys.stderr)
            return 2
        on_gpu = report.get("extra", {}).get("engine", {}).get("calibration_bounds_cache", {})

    import torch

    from opgate.model.errors import InputError
    from opgate.verify import bounds_device
    from opgate.verify.calibrate import CaseBounds, truth_and_baseline
    from opgate.verify.inputs import case_input_elements, make_inputs, plan_cases
    from opgate.verify.loaded_specs import loaded_operator

    torch.set_num_threads(1)
    slow_s = bounds_device.SLOW_REFERENCE_S
    print(f"{'plan':40s} {'large':>5s} {'CPU terms ms/case':>18s} {'call ms (median, max)':>22s} "
          f"{'calls >= ' + format(1000 * slow_s, 'g') + ' ms':>14s} {'GPU ms/case (report)':>21s}")
    for spec, name, dtype in wanted:
        try:
            op = loaded_operator(spec, name)
        except InputError as exc:
            print(exc, file=sys.stderr)
            return 2
        large = [c for c in plan_cases(op, args.budget, 0)
                 if case_input_elements(op, c) >= bounds_device.MIN_GPU_ELEMENTS]
        terms_s, calls_s = 0.0, []
        for case in large:
            truth, _ = truth_and_baseline(op, case, dtype)
            inputs = make_inputs(op, case, dtype).truth
            with torch.no_grad():
                op.reference(*inputs)  # a first call pays its ops' lazy set-up
                began = time.thread_time()
                op.reference(*inputs)
                calls_s.append(time.thread_time() - began)
            began = time.perf_counter()
            CaseBounds._computed(op, case, dtype, truth, inputs)
            terms_s += time.perf_counter() - began
        calls_s.sort()
        gpu = on_gpu.get(f"{name} {dtype}", {})
        gpu_text = (f"{gpu['terms_ms_on_gpu'] / gpu['on_gpu']:.0f} over {gpu['on_gpu']}" if gpu.get("on_gpu")
                    else "-")
        call_text = (f"{1000 * calls_s[len(calls_s) // 2]:.1f}, {1000 * calls_s[-1]:.1f}" if calls_s else "-")
        print(f"{name + ' ' + dtype:40s} {len(large):5d} {1000 * terms_s / max(len(large), 1):18.0f} "
              f"{call_text:>22s} {sum(c >= slow_s for c in calls_s):14d} {gpu_text:>21s}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
