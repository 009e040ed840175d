"""Two verify reports of the same spec, measurement windows on and off (scripts/gpu/windows_side_by_side.sh): when
each run's measurements ran, how long each run took, what its windows did, and whether the medians agree.

    python3 scripts/gpu/windows_compare.py ON.json OFF.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def median_us(result: dict[str, Any]) -> float | None:
    """A runtime check's median time in microseconds, None where it timed none (also autotune_ab_compare.py's)."""
    for figure in result.get("figures", []):
        if figure.get("key") == "verify.runtime.median_time" and isinstance(figure.get("value"), (int, float)):
            return float(figure["value"])
    return None


def _summary(report: dict[str, Any]) -> dict[str, Any]:
    # an interrupted run's unfinished checks have a start and no end: they are counted apart, not measured
    every = report.get("extra", {}).get("timeline", {})
    timeline = {check: span for check, span in every.items() if len(span) >= 2}
    measured = {check: span for check, span in timeline.items()
                if check.endswith((".runtime", ".recovery")) and not check.endswith("_warm_up")}
    others = ("_warm_up", ".runtime", ".recovery", ".sanitizer", ".racecheck", ".initcheck", ".synccheck")
    numerics_end = max((span[1] for check, span in timeline.items() if not check.endswith(others)), default=0.0)
    engine = report.get("extra", {}).get("engine", {})
    return {"duration_s": round(report.get("duration_s", 0.0), 1), "exit_code": report.get("exit_code"),
            "unfinished": sum(1 for span in every.values() if len(span) < 2),
            "measurements": len(measured),
            "first_measurement_s": min((s[0] for s in measured.values()), default=None),
            "last_measurement_s": max((s[1] for s in measured.values()), default=None),
            "measured_before_numerics_end": sum(1 for s in measured.values() if s[1] <= numerics_end),
            "numerics_end_s": numerics_end, "windows": engine.get("measurement_windows", {}),
            "medians": {r["check_id"]: m for r in report.get("results", []) if (m := median_us(r)) is not None},
            "outcomes": {r["check_id"]: r.get("outcome") for r in report.get("results", [])}}


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: windows_compare.py ON.json OFF.json (two verify reports)", file=sys.stderr)
        return 2
    try:
        on, off = (_summary(json.loads(Path(p).read_text())) for p in argv[1:3])
    except (OSError, ValueError, AttributeError) as exc:
        print(f"windows_compare.py: {' '.join(argv[1:3])}: not two readable verify reports ({exc})", file=sys.stderr)
        return 2
    for name, run in (("windows on", on), ("windows off", off)):
        print(f"{name}: report {run['duration_s']} s, exit {run['exit_code']}, {run['measurements']} measurements from "
              f"{run['first_measurement_s']} s to {run['last_measurement_s']} s, {run['measured_before_numerics_end']} "
              f"of them before the last numerics check ended ({run['numerics_end_s']} s), {run['unfinished']} checks "
              f"unfinished; windows {run['windows']}")
    ratios = []
    print("\n| runtime check | median on (us) | median off (us) | on / off |\n|---|---|---|---|")
    for check in sorted(set(on["medians"]) & set(off["medians"])):
        ratio = on["medians"][check] / off["medians"][check] if off["medians"][check] else float("nan")
        ratios.append(ratio)
        print(f"| {check} | {on['medians'][check]:.2f} | {off['medians'][check]:.2f} | {ratio:.3f} |")
    if ratios:
        print(f"\non/off median ratio: median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, "
              f"max {max(ratios):.3f} over {len(ratios)} checks")
    differ = {c: (o, off["outcomes"].get(c)) for c, o in on["outcomes"].items()
              if c in off["outcomes"] and off["outcomes"][c] != o}
    print(f"outcomes that differ: {differ or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
