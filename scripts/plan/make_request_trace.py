"""Write the deterministic request-rate trace tests/data/plan/request_trace.csv (issue 18, autoscale).

Six hours at 15 s steps: a morning ramp from a quiet base to a daytime plateau, two short bursts (a batch job's
fan-out, a retry storm), an evening decline, with Poisson noise from a fixed seed. Run from the repo root:

    python scripts/plan/make_request_trace.py [--out tests/data/plan/request_trace.csv]
"""

from __future__ import annotations

import argparse
import math
import random
from pathlib import Path

STEP_S = 15
HOURS = 6
SEED = 18


def rate_at(t_s: float) -> float:
    hour = t_s / 3600.0
    base = 12.0 + 48.0 / (1.0 + math.exp(-(hour - 1.5) * 3.0))  # ramp 12 -> 60 req/s around 1.5 h
    base -= 35.0 / (1.0 + math.exp(-(hour - 4.8) * 3.0))  # evening decline
    base *= 1.0 + 0.08 * math.sin(hour * 2 * math.pi * 1.3)
    if 2.5 <= hour < 2.6:  # a 6-minute fan-out burst at 2x
        base *= 2.0
    if 3.7 <= hour < 3.75:  # a 3-minute retry storm at 1.6x
        base *= 1.6
    return base


def poisson(rng: random.Random, mean: float) -> int:
    # normal approximation is fine for means in the hundreds; exact inversion below 30
    if mean < 30:
        limit, k, p = math.exp(-mean), 0, 1.0
        while True:
            p *= rng.random()
            if p <= limit:
                return k
            k += 1
    return max(0, int(round(rng.gauss(mean, math.sqrt(mean)))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tests/data/plan/request_trace.csv"))
    args = parser.parse_args()
    rng = random.Random(SEED)
    lines = ["t_s,requests_per_s"]
    for step in range(HOURS * 3600 // STEP_S):
        t = step * STEP_S
        count = poisson(rng, rate_at(t) * STEP_S)
        lines.append(f"{t},{count / STEP_S:.4f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {len(lines) - 1} rows to {args.out}")


if __name__ == "__main__":
    main()
