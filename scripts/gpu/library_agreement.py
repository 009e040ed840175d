"""A library-corpus report (one `opgate verify DIR` run, finished or interrupted) against the corpus manifest: each
manifest row's worst result so far, judged as scripts/truth_corpus.py judges a run (observe, agrees).

    PYTHONPATH=src python3 scripts/gpu/library_agreement.py REPORT.json [--device gpu]

Prints every disagreement and one line of counts; exit 1 on a disagreement. A row with no result yet is `missing`
(an interrupted run), not a disagreement."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import truth_corpus  # noqa: E402

MANIFEST = ROOT / "tests" / "data" / "verify" / "library_corpus" / "manifest.toml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="gpu")
    args = parser.parse_args()
    try:
        report = json.loads(args.report.read_text())
    except (OSError, ValueError) as exc:
        print(f"{args.report}: not a readable JSON report ({exc}); pass the --json file of an opgate verify run")
        return 2
    by_file: dict[str, list[dict]] = {}
    for result in report.get("results", []):
        spec = (result.get("extra") or {}).get("spec_file")
        if spec:
            by_file.setdefault(Path(spec).name, []).append(result)
    counts = {"agree": 0, "disagree": 0, "missing": 0}
    for row in truth_corpus.load_manifest(MANIFEST):
        run = truth_corpus.FileRun(row.file, report.get("exit_code"), float(report.get("duration_s") or 0.0),
                                   by_file.get(Path(row.file).name, []))
        seen = truth_corpus.observe(run, row)
        if seen.outcome == "missing":
            counts["missing"] += 1
        elif truth_corpus.agrees(row, seen, args.device):
            counts["agree"] += 1
        else:
            counts["disagree"] += 1
            print(f"disagree: {row.file} {row.op} {row.impl}: expected {row.expected(args.device)}, "
                  f"saw {sorted(seen.verdicts())}: {seen.reason[:200]}")
    print(", ".join(f"{n} {k}" for k, n in counts.items()))
    return 1 if counts["disagree"] else 0


if __name__ == "__main__":
    sys.exit(main())
