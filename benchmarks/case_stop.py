"""A numerics case far past its prediction under Triton's interpreter, two ways in one run: opgate sources from before
the case watchdog (verify/case_watchdog.py) and this checkout's, side by side on the same spec
(tests/data/verify/mispredicted_case_spec.py: T=1, H=65537 launches 65537 programs, predicted from its 65537
elements at ~0.1 s), numerics only at --time-budget 1 (each check gets the 15 s least), the bound cache off.

    PYTHONPATH=src python benchmarks/case_stop.py --before /path/to/older/src [--json F]

Prints each run's wall time, the check's duration and the case's fate; both verdicts must agree.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "tests" / "data" / "verify" / "mispredicted_case_spec.py"


def start(src: Path, report: Path) -> tuple[subprocess.Popen[bytes], float]:
    env = {**os.environ, "PYTHONPATH": str(src), "OPGATE_CACHE": "0"}
    env.pop("TRITON_INTERPRET", None)
    command = [sys.executable, "-m", "opgate", "verify", str(SPEC), "--stages", "numerics", "--no-extras",
               "--time-budget", "1", "--jobs", "1", "--json", str(report)]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), \
        time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, required=True, help="src folder of the opgate to compare against")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        runs = {name: (*start(src, Path(folder) / f"{name}.json"), Path(folder) / f"{name}.json")
                for name, src in (("before", args.before.resolve()), ("now", ROOT / "src"))}
        ended: dict[str, float] = {}
        while len(ended) < len(runs):  # each run's own wall time, both running at once
            for name, (proc, began, _) in runs.items():
                if name not in ended and proc.poll() is not None:
                    ended[name] = time.perf_counter() - began
            time.sleep(0.1)
        for name, (proc, _, report) in runs.items():
            [check] = [r for r in json.loads(report.read_text())["results"] if r.get("stage") == "numerics"]
            capped = (check.get("extra", {}).get("time_budget") or {}).get("capped", [])
            stopped = [c for c in capped if "stopped_after_s" in c]
            wide = [c for c in check["extra"]["cases"] if c["case"].startswith("T=1,H=6553")]
            fate = (f"{stopped[0]['case'].split(' ')[0]} stopped after {stopped[0]['stopped_after_s']:g} s"
                    if stopped else ", ".join(f"{c['case'].split(' ')[0]} ran whole in {c['seconds']:.1f} s"
                                              for c in wide) or "none ran")
            rows.append({"run": name, "exit": proc.returncode, "wall_s": round(ended[name], 1),
                         "check_s": round(check["duration_s"], 1), "outcome": check["outcome"],
                         "cases_run": len(check["extra"]["cases"]), "wide_cases": fate})
    print(f"{'run':8} {'exit':>4} {'wall s':>7} {'check s':>8} {'outcome':>8} {'cases':>5}  the wide cases")
    for row in rows:
        print(f"{row['run']:8} {row['exit']:4d} {row['wall_s']:7.1f} {row['check_s']:8.1f} {row['outcome']:>8} "
              f"{row['cases_run']:5d}  {row['wide_cases']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
