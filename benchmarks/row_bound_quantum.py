"""row_bound's smallest quantum (verify/error_bounds.py), two ways in one run: over every term (before 2026-12-02)
and over QUANTUM_SAMPLE terms first, stopping there when they already make the first addition inexact (now). Term
vectors shaped like the bound terms' rows: float64 products (a gradient element of fla's linear cross-entropy
depends on 4.2 M of them), float16 values (where exact additions matter). The results must agree exactly.

    PYTHONPATH=src python benchmarks/row_bound_quantum.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from opgate.verify import error_bounds


def _first_over_all(terms: torch.Tensor, count: int, mean_abs: float, spread: float, roundoff: float) -> int:
    quantum = float(error_bounds._quantum(terms).min())
    return (error_bounds.first_inexact_step(count, mean_abs, spread, quantum / roundoff)
            if math.isfinite(quantum) else 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    rows = {
        "float64 products, 4.2 M": torch.randn(4_200_000, dtype=torch.float64, generator=generator) * 1e-3,
        "float64 products, 65 k": torch.randn(65_536, dtype=torch.float64, generator=generator),
        "float16 values, 1 M": torch.randn(1_048_576, generator=generator).half().double(),
    }
    print(f"{'terms':28} {'all terms (s)':>14} {'sample first (s)':>17} {'speed-up':>9} {'same':>5}")
    for name, terms in rows.items():
        count = int(terms.numel())
        mean = float(terms.sum()) / count
        spread = math.sqrt(max(float(terms.pow(2).sum()) / count - mean * mean, 0.0))
        timings = {}
        results = {}
        for label, fn in (("all", _first_over_all), ("sample", error_bounds._first_inexact_addition)):
            began = time.perf_counter()
            for _ in range(args.repeats):
                results[label] = fn(terms, count, abs(mean), spread, 2.0**-24)
            timings[label] = (time.perf_counter() - began) / args.repeats
        print(f"{name:28} {timings['all']:14.4f} {timings['sample']:17.4f} "
              f"{timings['all'] / timings['sample']:8.1f}x {str(results['all'] == results['sample']):>5}")


if __name__ == "__main__":
    main()
