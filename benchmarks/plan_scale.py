"""Benchmark: `opgate plan mig` on a 1,000-GPU mixed fleet with 5,000 workloads (issue 18).

Deterministic (seeded) fleet and workloads; prints the solve time, CP-SAT status, objective, bound, gap and the
independent legality check of every emitted layout. Run from the repo root:

    PYTHONPATH=src python benchmarks/plan_scale.py [--gpus 1000] [--workloads 5000] [--time-limit 50]
"""

from __future__ import annotations

import argparse
import json
import random
import time

FLEET_MIX = {"a100-40gb": 0.10, "a100-80gb": 0.20, "h100-80gb": 0.30, "h200-141gb": 0.15, "b200-180gb": 0.05,
             "a30-24gb": 0.10, "l4": 0.10}
# replica memory needs (GB) of typical inference services: small models to 70B-class on one GPU instance
MEMORY_CHOICES = (4, 6, 9, 12, 16, 18, 22, 30, 38, 44, 60, 70, 85, 130, 170)


SMALL_MEMORY_CHOICES = (4, 6, 9, 12, 16, 18)  # --fits: a load the fleet can hold entirely


def make_inputs(gpus: int, workloads: int, seed: int = 18, fits: bool = False):
    from opgate.plan.inputs import parse_fleet, parse_workloads

    rng = random.Random(seed)
    fleet_entries = []
    remaining = gpus
    for position, (model, share) in enumerate(FLEET_MIX.items()):
        count = remaining if position == len(FLEET_MIX) - 1 else int(round(gpus * share))
        remaining -= count
        for node in range(0, count, 8):
            fleet_entries.append({"model": model, "count": min(8, count - node), "node": f"{model}-n{node // 8}"})
    entries = []
    for index in range(workloads):
        memory = rng.choice(SMALL_MEMORY_CHOICES if fits else MEMORY_CHOICES)
        entries.append({"name": f"svc-{index:05d}", "memory_gb": memory,
                        "replicas": 1 if fits else rng.choice((1, 1, 1, 2, 3)),
                        "min_compute_slices": rng.choice((1, 1, 1, 2, 3)) if memory < 40 else 1,
                        "priority": rng.choice((1, 1, 2, 3)), "isolation": "mig"})
    return parse_fleet({"gpu": fleet_entries}), parse_workloads({"workload": entries})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--workloads", type=int, default=5000)
    parser.add_argument("--time-limit", type=float, default=50.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--gap-limit", type=float, default=0.0, help="stop once CP-SAT's relative gap is below this")
    parser.add_argument("--json", dest="json_path", default="")
    parser.add_argument("--fits", action="store_true", help="a load the fleet can hold (small services, one replica)")
    args = parser.parse_args()
    from opgate.plan.legality import check_plan
    from opgate.plan.mig_solver import plan_mig

    started = time.perf_counter()
    fleet, workloads = make_inputs(args.gpus, args.workloads, fits=args.fits)
    built = time.perf_counter() - started
    plan = plan_mig(fleet, workloads, time_limit_s=args.time_limit, workers=args.workers, model="pattern",
                    gap_limit=args.gap_limit)
    total = time.perf_counter() - started
    violations = check_plan(plan.layouts, workloads)
    summary = {"gpus": len(fleet.gpus), "workloads": len(workloads), "replicas": plan.requested_replicas,
               "placed_replicas": plan.placed_replicas, "weighted_placed": plan.weighted_placed,
               "weighted_bound": plan.weighted_bound, "placement_gap": round(plan.placement_gap, 6),
               "input_s": round(built, 2), "total_s": round(total, 2), **plan.stats.to_dict(),
               "gpus_used": len(plan.layouts), "violations": len(violations)}
    for key, value in summary.items():
        print(f"{key:>16}: {value}")
    if args.json_path:
        with open(args.json_path, "w") as handle:
            json.dump(summary, handle, indent=2)
    if violations:
        raise SystemExit(f"{len(violations)} legality violations, first: {violations[0]}")


if __name__ == "__main__":
    main()
