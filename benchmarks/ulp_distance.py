"""An output's ULP figures (compare.compare_output's ulp_max and ulp_median) two ways in one run: every bit pattern
widened to int64 and the distances converted to float64 before their max and median (before 2026-12-05, 44e8006),
and the ordered bits kept in the float's own integer width, the order statistics taken on the integers, only the two
figures converted (now). Outputs shaped like fla's linear cross-entropy dW (8192 x 512 = 4.2 M elements) in float32,
float16 and bfloat16; the two ways alternate, best of --repeats, one torch thread (as a calibration process runs).
The figures must be the same, bit for bit.

    PYTHONPATH=src python benchmarks/ulp_distance.py [--repeats 5]
"""

from __future__ import annotations

from typing import Any

import torch
from compare_output import best_seconds, dw_shaped_setup  # this folder is sys.path[0]

from opgate.verify import compare


def widened_first(candidate: Any, truth: Any) -> tuple[float, float]:
    """The definition before 44e8006: int64 bit patterns, the distances as float64, then their max and median."""
    def ordered(values: Any) -> Any:
        int_type = {2: torch.int16, 4: torch.int32, 8: torch.int64}[values.element_size()]
        bits = values.contiguous().view(int_type).to(torch.int64)
        magnitude = bits & ((1 << (8 * values.element_size() - 1)) - 1)
        return torch.where(bits < 0, -magnitude, magnitude)

    ulps = (ordered(candidate) - ordered(truth)).abs().to(torch.float64)
    return float(ulps.max()), float(ulps.median())


def own_width(candidate: Any, truth: Any) -> tuple[float, float]:
    """compare_output's way now."""
    ulps = compare.ulp_distance(candidate.reshape(-1), truth.reshape(-1))
    return float(ulps.max().to(torch.float64)), float(ulps.median().to(torch.float64))


def main() -> None:
    repeats, generator, truth64 = dw_shaped_setup()
    print(f"{'output (8192 x 512)':20} {'int64, then float64':>20} {'own width':>10} {'speed-up':>9}  same figures")
    for dtype in ("float32", "float16", "bfloat16"):
        torch_dtype = getattr(torch, dtype)
        truth = truth64.to(torch_dtype)
        noise = 1 + 1e-2 * torch.randn(truth64.shape, generator=generator, dtype=torch.float64)
        candidate = (truth64 * noise).to(torch_dtype)
        candidate.view(-1)[:4] = torch.tensor([0.0, -0.0, float("inf"), -1e-30], dtype=torch_dtype)  # signs, extremes
        same = widened_first(candidate, truth) == own_width(candidate, truth)
        fast, slow = best_seconds(lambda: own_width(candidate, truth), repeats,
                                  lambda: widened_first(candidate, truth))
        print(f"{dtype:20} {slow * 1e3:17.0f} ms {fast * 1e3:7.0f} ms {slow / fast:8.2f}x  {same}")


if __name__ == "__main__":
    main()
