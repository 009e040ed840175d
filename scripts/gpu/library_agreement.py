"""A library-corpus report (one `opgate verify DIR` run, finished or interrupted) against the corpus manifest: each
manifest row's worst result so far, judged as scripts/truth_corpus.py judges a run (observe, agrees).

    PYTHONPATH=src python3 scripts/gpu/library_agreement.py REPORT.json [--device gpu]

Prints every disagreement and one line of counts; exit 1 on a disagreement. After an interrupt a row with no result
yet is `missing`, and one that expects a finding (fail or warn) while some of its checks have not run is
`incomplete` (its forward's sanitizer passes may be in and its numerics not yet; its gradient twin's class may come
before its forward's): not a disagreement. So is any row with no numerics result yet, whatever it expects. A row that expects a pass and saw a failure disagrees however partial."""

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
    not_run = set((report.get("extra") or {}).get("not_run") or [])
    counts = {"agree": 0, "disagree": 0, "incomplete": 0, "missing": 0}
    for row in truth_corpus.load_manifest(MANIFEST):
        run = truth_corpus.FileRun(row.file, report.get("exit_code"), float(report.get("duration_s") or 0.0),
                                   by_file.get(Path(row.file).name, []))
        seen = truth_corpus.observe(run, row)
        if seen.outcome == "missing":
            counts["missing"] += 1
        elif not _numerics_judged(row, by_file.get(Path(row.file).name, [])):
            counts["incomplete"] += 1  # its sanitizer runs may have passed; no case of it was judged yet
        elif truth_corpus.agrees(row, seen, args.device):
            counts["agree"] += 1
        elif row.expected(args.device) != "pass" and _unfinished(row, not_run):
            counts["incomplete"] += 1
        else:
            counts["disagree"] += 1
            print(f"disagree: {row.file} {row.op} {row.impl}: expected {row.expected(args.device)}, "
                  f"saw {sorted(seen.verdicts())}: {seen.reason[:200]}")
    print(", ".join(f"{n} {k}" for k, n in counts.items()))
    return 1 if counts["disagree"] else 0


def _check_prefixes(row: "truth_corpus.Row") -> tuple[str, str]:
    """The check ids of the row's implementation start with these: its operator's and its gradient twin's."""
    return f"verify.{row.op}.{row.impl}.", f"verify.{row.op}.grad.{row.impl}."


def _numerics_judged(row: "truth_corpus.Row", results: list[dict]) -> bool:
    """Whether a numerics check of the row's implementation has a result: attorch's first H200 runs stopped at their
    time limits before the norm layers' numerics, and those rows read `agree` on their sanitizer passes alone
    (thirty-sixth session)."""
    return any(r.get("stage") == "numerics" and str(r.get("check_id", "")).startswith(_check_prefixes(row))
               for r in results)


def _unfinished(row: "truth_corpus.Row", not_run: set[str]) -> bool:
    """Whether a check of the row's implementation (its operator's or its gradient twin's) had not run."""
    return any(check_id.startswith(_check_prefixes(row)) for check_id in not_run)


if __name__ == "__main__":
    sys.exit(main())
