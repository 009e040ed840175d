"""Wall time of `opgate verify` per example operator at its default stages, and where it goes, per stage.

    python benchmarks/verify_wall_time.py [--examples softmax quantize] [--json out.json] [-- extra verify args]

Each example runs as a user runs it (`python -m opgate verify examples/ops/NAME.py` with the CLI's defaults, plus
the extra arguments given after `--`), in a fresh process, one after another. Printed last: one row per example
with the wall time, the exit code, the result counts and the summed check time per stage (calibration, numerics,
runtime, sanitizer, recovery, other). Summed check time is CPU-side work, not wall: checks run side by side.
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
STAGE_SUFFIXES = {".runtime": "runtime", ".sanitizer": "sanitizer", ".racecheck": "sanitizer",
                  ".initcheck": "sanitizer", ".synccheck": "sanitizer", ".recovery": "recovery",
                  ".calibration": "calibration", ".ncu": "ncu", ".qos": "qos"}
STAGES = ("calibration", "numerics", "runtime", "sanitizer", "recovery", "other")


def stage_of(check_id: str) -> str:
    for suffix, stage in STAGE_SUFFIXES.items():
        if check_id.endswith(suffix):
            return stage if stage in STAGES else "other"
    return "numerics" if check_id.startswith("verify.") else "other"


def run_example(name: str, extra_args: list[str], timeout_s: float,
                reports: Path | None = None, cold: bool = False) -> dict[str, object]:
    spec = ROOT / "examples" / "ops" / f"{name}.py"
    with tempfile.TemporaryDirectory(prefix="opgate-wall-") as tmp:
        report_path = Path(tmp) / "report.json"
        command = [sys.executable, "-m", "opgate", "verify", str(spec), "--json", str(report_path),
                   "--out", str(Path(tmp) / "artefacts"), *extra_args]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"),
                                                                        os.environ.get("PYTHONPATH", "")) if p)}
        if cold:  # a fresh machine or CI container: no compiled Triton kernel, no inductor graph cached
            env.update(TRITON_CACHE_DIR=str(Path(tmp) / "triton-cache"),
                       TORCHINDUCTOR_CACHE_DIR=str(Path(tmp) / "inductor-cache"))
        started = time.perf_counter()
        try:
            proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
            code: int | str = proc.returncode
            tail = (proc.stdout + proc.stderr)[-600:]
        except subprocess.TimeoutExpired:
            code, tail = "timeout", ""
        wall = time.perf_counter() - started
        row: dict[str, object] = {"example": name, "caches": "cold" if cold else "as found", "wall_s": round(wall, 1),
                                  "exit": code,
                                  "command": " ".join(command[1:3] + [f"examples/ops/{name}.py", *extra_args])}
        if not report_path.is_file():
            row["error"] = tail
            return row
        report = json.loads(report_path.read_text())
        if reports is not None:
            reports.mkdir(parents=True, exist_ok=True)
            (reports / f"{name}.json").write_text(report_path.read_text())
    per_stage = dict.fromkeys(STAGES, 0.0)
    counts: dict[str, int] = {}
    for result in report["results"]:
        per_stage[stage_of(result["check_id"])] += float(result.get("duration_s") or 0.0)
        counts[result["outcome"]] = counts.get(result["outcome"], 0) + 1
    row["counts"] = counts
    row["stage_s"] = {k: round(v, 1) for k, v in per_stage.items()}
    row["engine"] = report.get("extra", {}).get("engine", {})
    timeline = report.get("extra", {}).get("timeline", {})
    if timeline:  # the session's own wall time beside the whole command's (spec load, calibration before it)
        row["checks_wall_s"] = round(max(t[-1] for t in timeline.values()), 1)
    return row


def main(argv: list[str]) -> int:
    extra: list[str] = []
    if "--" in argv:
        extra, argv = argv[argv.index("--") + 1:], argv[:argv.index("--")]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", nargs="*", default=None, help="example names (default: every examples/ops/*.py)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per example before it is killed")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    parser.add_argument("--reports", type=Path, default=None, help="keep each example's opgate report here")
    parser.add_argument("--cold-caches", action="store_true", help="give each run empty Triton and inductor "
                        "caches (a fresh machine); default: the caches as found (warm after a first run)")
    args = parser.parse_args(argv)
    names = args.examples or sorted(p.stem for p in (ROOT / "examples" / "ops").glob("*.py")
                                    if p.stem != "make_onnx_models")
    rows = []
    for name in names:
        row = run_example(name, extra, args.timeout, args.reports, args.cold_caches)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"\n{'example':<10} {'caches':>8} {'wall s':>7} {'exit':>7}  " + " ".join(f"{s:>11}" for s in STAGES)
          + "  results")
    for row in rows:
        stage = row.get("stage_s", {})
        counts = ", ".join(f"{n} {k}" for k, n in sorted(row.get("counts", {}).items()))  # type: ignore[union-attr]
        print(f"{row['example']:<10} {row['caches']:>8} {row['wall_s']:>7} {str(row['exit']):>7}  "
              + " ".join(f"{stage.get(s, 0.0):>11}" for s in STAGES)  # type: ignore[union-attr]
              + f"  {counts or row.get('error', '')[-120:]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
