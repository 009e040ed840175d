"""The two arms of scripts/gpu/autotune_ab.sh side by side: per arm the run's seconds and its warm-ups' seconds and
compiles (library_summary.py says when each stage ran); then each runtime check's median time in both arms, and the
ratio, so that a config the within-limit arm leaves out shows as a slower median there.

    python3 scripts/gpu/autotune_ab_compare.py OUT/library/within.json OUT/library/default.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from windows_compare import median_us  # this folder is on the path when the script runs


def medians(report: dict[str, Any]) -> dict[str, float]:
    """Runtime check id -> its median time in microseconds, where the check timed one."""
    return {r["check_id"]: m for r in report.get("results", []) if (m := median_us(r)) is not None}


def arm_line(name: str, report: dict[str, Any]) -> str:
    engine = (report.get("extra") or {}).get("engine") or {}
    warm = engine.get("warm_ups") or {}
    return (f"{name}: report {report.get('duration_s', 0):.0f} s, exit {report.get('exit_code')}, "
            f"counts {report.get('counts')}; warm-ups {warm.get('tasks')} tasks, "
            f"{warm.get('seconds')} s, {warm.get('compiles')} compiles in {warm.get('compile_s')} s, "
            f"within limit {warm.get('within_limit')}")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("autotune_ab_compare.py: give two or more arm reports (OUT/library/ARM.json)", file=sys.stderr)
        return 2
    arms: dict[str, dict[str, Any]] = {}
    for given in argv:
        try:
            name = Path(given).stem
            arms[given if name in arms else name] = json.loads(Path(given).read_text())
        except (OSError, ValueError) as exc:
            print(f"autotune_ab_compare.py: {given}: not a readable opgate JSON report ({exc})", file=sys.stderr)
            return 2
    for name, report in arms.items():
        print(arm_line(name, report))
    timed = {name: medians(report) for name, report in arms.items()}
    names = list(timed)
    print("median time, us: " + " | ".join(names) + " | ratio last/first")
    for check in sorted(set().union(*timed.values())):
        values = [timed[name].get(check) for name in names]
        ratio = (f"{values[-1] / values[0]:.3f}" if values[0] and values[-1] else "-")
        print(f"  {check}: " + " | ".join("-" if v is None else f"{v:.1f}" for v in values) + f" | {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
