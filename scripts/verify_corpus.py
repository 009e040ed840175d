#!/usr/bin/env python3
"""Run `opgate verify` over the buggy-kernel corpus (tests/data/verify/corpus) and count: every `bad_*`
implementation must be flagged (failed in at least one dtype), every `good_*` one must pass in all.

    PYTHONPATH=src python scripts/verify_corpus.py [--budget quick] [--json OUT]
Prints one row per implementation and a summary line; exit 1 on any miss or false positive.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "data" / "verify" / "corpus"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default="quick")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    verdicts: dict[str, list[str]] = defaultdict(list)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for spec in sorted(CORPUS.glob("*.py")):
            report = Path(tmp) / f"{spec.stem}.json"
            subprocess.run([sys.executable, "-m", "opgate", "verify", str(spec), "--budget", args.budget,
                            "--no-extras", "--stages", "numerics", "--no-shrink", "--json", str(report)],
                           capture_output=True, text=True, timeout=1800)
            for result in json.loads(report.read_text())["results"]:
                impl = result.get("extra", {}).get("implementation")
                if impl and (impl.startswith("bad_") or impl.startswith("good_")):
                    verdicts[f"{spec.stem}:{impl}"].append(result["outcome"])
    rows, misses = [], 0
    for name, outcomes in sorted(verdicts.items()):
        impl = name.split(":")[1]
        flagged = any(o in ("failed", "error") for o in outcomes)
        ok = flagged if impl.startswith("bad_") else not flagged
        misses += not ok
        rows.append({"implementation": name, "outcomes": outcomes, "flagged": flagged, "as_expected": ok})
        print(f"{'ok  ' if ok else 'MISS'} {name:55s} {'flagged' if flagged else 'passed':8s} {','.join(outcomes)}")
    bad = [r for r in rows if r["implementation"].split(":")[1].startswith("bad_")]
    good = [r for r in rows if r["implementation"].split(":")[1].startswith("good_")]
    print(f"buggy flagged: {sum(r['flagged'] for r in bad)}/{len(bad)}; correct passed: "
          f"{sum(not r['flagged'] for r in good)}/{len(good)}; {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
