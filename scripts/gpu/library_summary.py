"""What a library run's report says about where its time went: results by stage and outcome, plans calibrated by
each 100 s, warm-worker starts, the heaviest bound terms.

    python3 scripts/gpu/library_summary.py REPORT.json
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path


def summary(report: dict) -> list[str]:
    engine = report.get("extra", {}).get("engine", {})
    lines = [f"report {report.get('duration_s', 0):.0f} s, interrupted {report.get('interrupted')}, "
             f"exit {report.get('exit_code')}, {report.get('counts')}"]
    outcomes = collections.Counter((r.get("stage") or "-", r["outcome"]) for r in report.get("results", []))
    lines += [f"  {stage} {outcome}: {count}" for (stage, outcome), count in sorted(outcomes.items())]
    workers = engine.get("warm_workers", {})
    lines.append(f"warm workers: {workers.get('started')} started, {workers.get('events')}")
    ends = sorted(span[1] for span in engine.get("calibration_spans_s", {}).values())
    lines.append("plans calibrated by " + ", ".join(f"{t} s: {sum(1 for e in ends if e <= t)}"
                                                     for t in range(100, 700, 100)))
    phases = engine.get("calibration_phases_s", {})
    heaviest = sorted(((p.get("bounds", 0.0), plan) for plan, p in phases.items()), reverse=True)[:6]
    lines.append(f"bound terms: {sum(p.get('bounds', 0.0) for p in phases.values()):.0f} s over {len(phases)} plans; "
                 "heaviest " + ", ".join(f"{plan} {seconds:.0f} s" for seconds, plan in heaviest))
    lines.append(f"spec load {engine.get('spec_load_s')} s, prepare {engine.get('prepare_s')} s, "
                 f"bound cache {engine.get('bounds_cache')}")
    return lines


if __name__ == "__main__":
    print("\n".join(summary(json.loads(Path(sys.argv[1]).read_text()))))
