"""A run stopped by a time limit, then the next run two ways, side by side in one call.

    python benchmarks/resume_after_interrupt.py PATH... --stop-after SECONDS [--json out.json] [-- extra verify args]

1. first:   `opgate verify PATH...` with an empty cache folder, sent SIGTERM after SECONDS (a CI job's time limit);
2. the cache folder is copied, and the copy loses its partial entries: what opgate kept before verify/resumed.py
   (the bound terms and the files judged wholly);
3. next run, finished checks kept: the same command on the first cache (verify/resumed.py);
4. next run, whole files only: the same command on the copy.

Printed: each run's wall time, exit code, how many results it judged and how many it reused, and whether runs 3
and 4 give every check the same outcome.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _env(cache: Path) -> dict[str, str]:
    return {**os.environ, "OPGATE_CACHE_DIR": str(cache), "OPGATE_VERDICT_CACHE": "1",
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)}


def _run(paths: list[str], report: Path, cache: Path, extra: list[str], stop_after: float | None,
         timeout_s: float) -> dict[str, Any]:
    command = [sys.executable, "-m", "opgate", "verify", *paths, "--json", str(report), *extra]
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=_env(cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=stop_after if stop_after is not None else timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # what a CI runner sends at its limit
        out, err = proc.communicate(timeout=120)
    data = json.loads(report.read_text()) if report.is_file() else None
    results = (data or {}).get("results", [])
    reused = sum(1 for r in results if (r.get("extra") or {}).get("cached_from"))
    return {"wall_s": round(time.perf_counter() - started, 1), "exit": proc.returncode,
            "judged": len(results) - reused, "reused": reused, "tail": (out + err)[-300:],
            "outcomes": {r["check_id"]: r["outcome"] for r in results},
            "verdict_cache": (data or {}).get("extra", {}).get("verdict_cache")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--stop-after", type=float, required=True, help="seconds before the first run's SIGTERM")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds each later run may take")
    parser.add_argument("--json", type=Path, help="write the measurements here")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    with tempfile.TemporaryDirectory(prefix="opgate-resume-bench-") as tmp:
        work = Path(tmp)
        kept, whole_only = work / "cache-kept", work / "cache-whole-files"
        first = _run(args.paths, work / "first.json", kept, extra, args.stop_after, args.timeout)
        shutil.copytree(kept, whole_only)
        dropped = [p.unlink() for p in whole_only.rglob("*.partial.json")]
        resumed = _run(args.paths, work / "resumed.json", kept, extra, None, args.timeout)
        rejudged = _run(args.paths, work / "whole.json", whole_only, extra, None, args.timeout)
    agree = resumed["outcomes"] == rejudged["outcomes"]
    rows = [("first run, SIGTERM at %g s" % args.stop_after, first),
            ("next run, finished checks kept (verify/resumed.py)", resumed),
            ("next run, whole files only (before)", rejudged)]
    print(f"paths: {' '.join(args.paths)}; extra verify args: {' '.join(extra) or '-'}; "
          f"partial entries dropped for the 'before' run: {len(dropped)}")
    print(f"{'run':<52} {'wall s':>7} {'exit':>5} {'judged':>7} {'reused':>7}")
    for name, run in rows:
        print(f"{name:<52} {run['wall_s']:>7.1f} {run['exit']!s:>5} {run['judged']:>7} {run['reused']:>7}")
    print(f"every check's outcome the same in both next runs: {agree} ({len(resumed['outcomes'])} checks)")
    if args.json:
        record = {"paths": args.paths, "stop_after_s": args.stop_after, "extra": extra, "agree": agree,
                  "runs": {name: {k: v for k, v in run.items() if k != "outcomes"} for name, run in rows}}
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
