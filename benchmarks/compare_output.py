"""compare_output (verify/compare.py) two ways in one run: every output classified element by element (isfinite and
isnan masks and their combinations: before 2026-12-03, and still the path of any output with a NaN, an Inf or an
overflow), and one float64 sum per tensor first, the classification skipped when every element is finite (now).
Outputs shaped like fla's linear cross-entropy dW (8192 x 512 = 4.2 M elements) in float32, float16 and bfloat16
against a float64 truth; the two ways alternate, best of --repeats, one torch thread (as a calibration process
runs). The statistics must be the same.

    PYTHONPATH=src python benchmarks/compare_output.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import torch

from opgate.verify import compare


def classifying(*tensors: Any) -> bool:
    return False  # every output takes the element-by-element classification


def best_seconds(call: Callable[[], Any], repeats: int, other: Callable[[], Any]) -> tuple[float, float]:
    """Best of `repeats` for `call` and for `other`, alternating so both meet the same machine state."""
    ours, theirs = [], []
    for _ in range(repeats):
        for runner, into in ((call, ours), (other, theirs)):
            began = time.perf_counter()
            runner()
            into.append(time.perf_counter() - began)
    return min(ours), min(theirs)


def dw_shaped_setup() -> tuple[int, Any, Any]:
    """(--repeats, a seeded generator, a float64 truth shaped like fla's linear cross-entropy dW) at one torch
    thread, as a calibration process runs: what this benchmark and ulp_distance.py start from."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    return args.repeats, generator, torch.randn(8192, 512, generator=generator, dtype=torch.float64) * 1e-3


def main() -> None:
    repeats, generator, truth = dw_shaped_setup()
    fast_path = compare.finite_everywhere
    print(f"{'output (8192 x 512)':22} {'classify every element':>23} {'sum first':>10} {'speed-up':>9}  same statistics")
    for dtype in ("float32", "float16", "bfloat16"):
        candidate = (truth * (1 + 1e-4 * torch.randn(truth.shape, generator=generator, dtype=torch.float64))).to(
            getattr(torch, dtype))

        def before() -> Any:
            compare.finite_everywhere = classifying
            try:
                return compare.compare_output(candidate, truth, dtype)
            finally:
                compare.finite_everywhere = fast_path

        def now() -> Any:
            return compare.compare_output(candidate, truth, dtype)

        same = repr(before()) == repr(now())
        fast, slow = best_seconds(now, repeats, before)
        print(f"{dtype:22} {slow * 1e3:20.0f} ms {fast * 1e3:7.0f} ms {slow / fast:8.2f}x  {same}")


if __name__ == "__main__":
    main()
