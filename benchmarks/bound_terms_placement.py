"""One operator's bound terms per case, on the CPU and on the GPU side by side: what each part costs in wall and CPU
seconds, and whether the calibration's placement rule (verify/bounds_device.py) would move the case.

    PYTHONPATH=src python benchmarks/bound_terms_placement.py SPEC.py OP [--dtype float32] [--match D=65535]
        [--devices cpu,cuda] [--limit 8] [--json OUT.json]

For each case (those whose label contains --match, at most --limit): one float64 reference call, one call plus one
reverse pass (what each of the accumulation bound's ~20 passes an output costs), and the whole terms
(calibrate.CaseBounds._computed), each on every device, timed by wall clock and by this process's CPU clock (a GPU
that is launch-bound shows up as CPU seconds). With --full-too the terms are timed a second time with every output's
samples kept whatever its reverse passes cost (error_bounds.OUTPUT_PASSES_S unlimited: the way before 2026-12-04),
and the largest ratio between the two's accumulation figures is printed. Nothing is cached; no verdict changes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable


def timed(fn: Callable[[], Any], device: str) -> tuple[float, float]:
    """(wall s, process CPU s) of fn, synchronised on the GPU."""
    import torch

    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - wall, time.process_time() - cpu


def one_reverse_pass(reference: Any, inputs: list[Any]) -> None:
    """The reference under autograd and one reverse pass of its first differentiable output."""
    import torch

    leaves = [v.detach().clone().requires_grad_(True) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
              for v in inputs]
    with torch.enable_grad():
        result = reference(*leaves)
        outputs = list(result) if isinstance(result, (tuple, list)) else [result]
        out = next((o for o in outputs if isinstance(o, torch.Tensor) and o.grad_fn is not None), None)
        if out is not None:
            wrt = [v for v in leaves if isinstance(v, torch.Tensor) and v.requires_grad]
            torch.autograd.grad(out, wrt, torch.ones_like(out), allow_unused=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("op")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--budget", default="standard")
    parser.add_argument("--match", default="", help="only cases whose label contains this")
    parser.add_argument("--devices", default="cpu,cuda")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--full-too", action="store_true")
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)

    import torch

    from opgate.verify import bounds_device, error_bounds
    from opgate.verify.calibrate import CaseBounds, truth_and_baseline
    from opgate.verify.inputs import make_inputs, plan_cases
    from opgate.model.errors import InputError
    from opgate.verify.loaded_specs import loaded_operator

    try:
        op = loaded_operator(args.spec, args.op)
    except InputError as exc:
        print(exc, file=sys.stderr)
        return 2
    devices = [d for d in args.devices.split(",") if d and (d != "cuda" or torch.cuda.is_available())]
    cases = [c for c in plan_cases(op, args.budget, 0) if args.match in c.label()][:args.limit]
    bounds_device.use_gpu(True)
    rows = []
    print(f"{'case':52s} {'device':6s} {'call s':>14s} {'call+reverse s':>16s} {'terms s':>16s}   (wall / CPU)")
    for case in cases:
        truth, _ = truth_and_baseline(op, case, args.dtype)
        inputs = make_inputs(op, case, args.dtype).truth
        moves = bounds_device._wanted(op.reference, inputs) if torch.cuda.is_available() else False
        for device in devices:
            where = [v.to(device) if isinstance(v, torch.Tensor) else v for v in inputs]
            with torch.no_grad():
                call = timed(lambda: op.reference(*where), device)
            reverse = timed(lambda: one_reverse_pass(op.reference, where), device)
            found: list[Any] = []
            terms = timed(lambda: found.append(CaseBounds._computed(op, case, args.dtype, truth, where)), device)
            row = {"case": case.label(), "device": device, "rule_moves_it": moves, "call_s": call,
                   "call_and_reverse_s": reverse, "terms_s": terms,
                   "thinned_from": [a.thinned_from for a in found[0].accumulation]}
            if args.full_too:
                limit, error_bounds.OUTPUT_PASSES_S = error_bounds.OUTPUT_PASSES_S, float("inf")
                try:
                    row["full_terms_s"] = timed(
                        lambda: found.append(CaseBounds._computed(op, case, args.dtype, truth, where)), device)
                finally:
                    error_bounds.OUTPUT_PASSES_S = limit
                row["accumulation_ratio"] = max(
                    (max(a.rmse / b.rmse, a.quantile / b.quantile)
                     for a, b in zip(found[0].accumulation, found[1].accumulation) if b.rmse > 0 and b.quantile > 0),
                    default=1.0)
            rows.append(row)
            fmt = lambda pair: f"{pair[0]:7.3f}/{pair[1]:7.3f}"  # noqa: E731
            full = (f"   full samples {fmt(row['full_terms_s'])}, thinned/full figures x{row['accumulation_ratio']:.3g}"
                    if args.full_too else "")
            print(f"{case.label()[:52]:52s} {device:6s} {fmt(call):>14s} {fmt(reverse):>16s} {fmt(terms):>16s}"
                  f"   rule: {'gpu' if moves else 'cpu'}, thinned {row['thinned_from']}{full}", flush=True)
    for device in devices:
        mine = [r for r in rows if r["device"] == device]
        print(f"{device}: terms {sum(r['terms_s'][0] for r in mine):.1f} s wall, "
              f"{sum(r['terms_s'][1] for r in mine):.1f} s CPU over {len(mine)} cases"
              + (f"; with every sample {sum(r['full_terms_s'][0] for r in mine):.1f} s wall, "
                 f"{sum(r['full_terms_s'][1] for r in mine):.1f} s CPU" if args.full_too else ""))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"spec": args.spec, "op": args.op, "dtype": args.dtype, "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
