"""The calibration's bound terms of one operator x dtype plan (calibrate.CaseBounds, nothing cached), two ways in
one run, alternated: the perturbed inputs as value * (1 + sign * step) and the log-space peak over a copy of the
finite elements (before 2026-12-05), and now (calibrate._moved_by: two passes, bit for bit the same;
error_bounds._finite_peak: no copy when every element is finite). Every case's bounds must be equal.

    PYTHONPATH=src python benchmarks/sensitivity_terms.py SPEC.py OP DTYPE [--repeats 2]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from typing import Any, Iterator

import torch

from opgate.verify import calibrate, error_bounds


def _moved_before(value: Any, step: Any, sign: float) -> Any:
    return value * (1 + sign * step)


def _peak_before(values: Any) -> float:
    finite = values[torch.isfinite(values)]
    return float(finite.abs().max()) if finite.numel() else 0.0


@contextlib.contextmanager
def before() -> Iterator[None]:
    saved = calibrate._moved_by, error_bounds._finite_peak
    calibrate._moved_by, error_bounds._finite_peak = _moved_before, _peak_before
    try:
        yield
    finally:
        calibrate._moved_by, error_bounds._finite_peak = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("op")
    parser.add_argument("dtype")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    os.environ["OPGATE_CACHE_DIR"] = tempfile.mkdtemp()  # nothing from the disk cache: every term computed
    os.environ["OPGATE_CACHE"] = "0"
    from opgate.verify.inputs import inputs_generated_once, plan_cases
    from opgate.verify.loaded_specs import loaded_operators

    torch.set_num_threads(1)  # as a calibration process beside the checks
    op = next(o for o in loaded_operators(args.spec) if o.name == args.op)
    cases = plan_cases(op, "standard", 0)
    with inputs_generated_once():
        truths = [calibrate.truth_and_baseline(op, case, args.dtype)[0] for case in cases]
        results: dict[str, list[Any]] = {}
        print(f"{args.op} {args.dtype}: {len(cases)} cases\n{'way':8} {'bound terms s':>13}")
        for _ in range(args.repeats):
            for way in ("before", "now"):
                began = time.perf_counter()
                with before() if way == "before" else contextlib.nullcontext():
                    results[way] = [calibrate.CaseBounds._computed(op, case, args.dtype, truth,
                                                                   calibrate.make_inputs(op, case, args.dtype).truth)
                                    for case, truth in zip(cases, truths)]
                print(f"{way:8} {time.perf_counter() - began:13.2f}")
    same = repr(results["before"]) == repr(results["now"])
    print(f"every case's bounds equal: {same}")


if __name__ == "__main__":
    main()
