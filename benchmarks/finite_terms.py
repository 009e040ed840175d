"""The bound terms' finiteness test (verify/error_bounds._sampled_terms), two ways in one run: torch.isfinite's mask,
all(), then nan_to_num_ on every product vector (before 2026-12-02), and one sum first, the mask and nan_to_num_ only
when the sum is not finite (now). Vectors shaped like the products of one sampled gradient element of fla's linear
cross-entropy (4.2 M float64 terms), finite and with one NaN. The answers must agree.

    PYTHONPATH=src python benchmarks/finite_terms.py [--repeats 20]
"""

from __future__ import annotations

import argparse
import time

import torch

from opgate.verify.compare import finite_everywhere


def mask_first(product: torch.Tensor) -> bool:
    finite = bool(torch.isfinite(product).all())
    product.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
    return finite


def sum_first(product: torch.Tensor) -> bool:
    finite = finite_everywhere(product)
    if not finite:
        product.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
    return finite


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    finite = torch.randn(4_194_304, generator=generator, dtype=torch.float64) * 1e-3
    with_nan = finite.clone()
    with_nan[12345] = float("nan")
    print(f"{'terms':28} {'mask, all, nan_to_num':>22} {'sum first':>10} {'speed-up':>9}  same answer")
    for label, vector in (("4.2 M float64, all finite", finite), ("4.2 M float64, one NaN", with_nan)):
        timings, answers = [], []
        for way in (mask_first, sum_first):
            answers.append(way(vector.clone()))
            began = time.perf_counter()
            for _ in range(args.repeats):
                way(vector.clone())
            clone_cost = time.perf_counter()
            for _ in range(args.repeats):
                vector.clone()
            timings.append(((clone_cost - began) - (time.perf_counter() - clone_cost)) / args.repeats)
        print(f"{label:28} {timings[0] * 1e3:20.2f} ms {timings[1] * 1e3:8.2f} ms {timings[0] / timings[1]:8.1f}x"
              f"  {answers[0] == answers[1]}")


if __name__ == "__main__":
    main()
