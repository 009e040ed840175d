"""A library of spec files verified five ways in one run, side by side, and where the time went.

    python benchmarks/verify_library.py DIR [--json out.json] [--modes one,again] [--fresh-gpu-caches] \
        [-- extra verify args]

1. naive:  `for f in DIR/*.py: opgate verify f` (one process per spec file, each paying its own imports, pool and
           calibration), with an empty bound cache;
2. one run: `opgate verify DIR`, with another empty bound cache (the cold first run of a CI job);
3. re-run, bound cache only: the same command again, nothing changed, OPGATE_VERDICT_CACHE=0 (every check judged
           again, the float64 bound terms from the cache the first run left);
4. re-run: the same command again with the verdict cache too (a CI job that keeps $OPGATE_CACHE_DIR between runs:
           verify/verdict_cache.py), nothing changed;
5. one file edited: a comment appended to the first spec file, then the same command: that file judged, the others
           reused.
The folder is copied first (step 5 edits the copy). --modes picks some of the five (naive,one,again,reused,edited;
the three re-runs need one). --fresh-gpu-caches gives the naive loop and the one run each an empty Triton cache and
FlagGems tuning database of their own (the re-runs keep the one run's), so that on a GPU neither mode finds the
other's compiled kernels; the naive loop's files share theirs, as a user's loop on one machine would.

Printed: wall time, exit code and result counts per mode, whether every check's outcome agrees across the modes,
and a profile of the one-run report: spec load, calibration (per phase: truth and baseline, bound terms, the rest),
numerics check time per phase (load and prepare, cases, probes, shrinking), Triton JIT compiles and their
seconds, the slowest cases, cases capped by the time budget, and the GPU stages' check time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


MODES = ("naive", "one", "again", "reused", "edited")
RERUNS = ("again", "reused", "edited")  # each runs on the cache the one run left


def _env(cache: Path, verdicts: bool = True, gpu_caches: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "OPGATE_CACHE_DIR": str(cache), "OPGATE_VERDICT_CACHE": "1" if verdicts else "0",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)}
    if gpu_caches is not None:
        env.update(TRITON_CACHE_DIR=str(gpu_caches / "triton"), FLAGGEMS_CACHE_DIR=str(gpu_caches / "flaggems"))
    return env


def parse_modes(text: str) -> list[str]:
    """`naive,one,...` in the order of MODES; ValueError names what is wrong."""
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = sorted(set(modes) - set(MODES))
    if not modes or unknown:
        raise ValueError(f"--modes {text!r}: {'unknown ' + ', '.join(unknown) if unknown else 'empty'}; "
                         f"pick from {','.join(MODES)}")
    if "one" not in modes and set(modes) & set(RERUNS):
        raise ValueError(f"--modes {text!r}: the re-runs ({', '.join(RERUNS)}) need 'one', whose cache they reuse")
    return [m for m in MODES if m in modes]


def _run(paths: list[str], report: Path, cache: Path, extra: list[str], timeout_s: float,
         verdicts: bool = True, gpu_caches: Path | None = None) -> dict[str, Any]:
    command = [sys.executable, "-m", "opgate", "verify", *paths, "--json", str(report), *extra]
    started = time.perf_counter()
    try:
        proc = subprocess.run(command, env=_env(cache, verdicts, gpu_caches), capture_output=True, text=True,
                              timeout=timeout_s)
        code: Any = proc.returncode
        tail = (proc.stdout + proc.stderr)[-400:]
    except subprocess.TimeoutExpired:
        code, tail = "timeout", ""
    return {"wall_s": time.perf_counter() - started, "exit": code, "tail": tail,
            "report": json.loads(report.read_text()) if report.is_file() else None}


def _outcomes(report: dict[str, Any] | None) -> dict[str, str]:
    return {r["check_id"]: r["outcome"] for r in (report or {}).get("results", [])}


def profile(report: dict[str, Any]) -> list[str]:
    """The one-run report's time, phase by phase."""
    lines: list[str] = []
    engine = report.get("extra", {}).get("engine", {})
    lines.append(f"spec load (all files, pre-flight children side by side): {engine.get('spec_load_s', 0):.1f} s")
    spans = engine.get("calibration_spans_s", {})
    if spans:
        first = min(s[0] for s in spans.values())
        last = max(s[1] for s in spans.values())
        lines.append(f"calibration: {len(spans)} operator x dtype plans, wall {last - first:.1f} s "
                     f"(from {first:.1f} s to {last:.1f} s of the run)")
    phases: Counter[str] = Counter()
    for values in engine.get("calibration_phases_s", {}).values():
        phases.update(values)
    if phases:
        lines.append("  calibration work by phase: " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.most_common()))
    cache = engine.get("bounds_cache")
    if cache:
        lines.append(f"  bound terms: {cache.get('hit', 0)} cases from the cache, {cache.get('computed', 0)} computed")
    numerics: Counter[str] = Counter()
    stages: Counter[str] = Counter()
    compiles, compile_s = 0, 0.0
    cases: list[tuple[float, str]] = []
    capped = 0
    for result in report.get("results", []):
        extra = result.get("extra") or {}
        if "phase_s" in extra and "cases" in extra:
            numerics.update(extra["phase_s"])
            for row in extra["cases"]:
                cases.append((float(row.get("seconds", 0.0)), f"{result['check_id']} {row['case']}"))
            jit = (extra.get("backend_facts") or {}).get("triton_jit") or {}
            compiles += int(jit.get("compiles", 0))
            compile_s += float(jit.get("seconds", 0.0))
            capped += len((extra.get("time_budget") or {}).get("capped", []))
        else:
            stage = result["check_id"].rsplit(".", 1)[-1]
            stages[stage] += float(result.get("duration_s", 0.0))
    if numerics:
        lines.append("numerics check time by phase (summed over checks, side by side in wall time): "
                     + ", ".join(f"{k} {v:.1f} s" for k, v in numerics.most_common()))
    lines.append(f"Triton JIT: {compiles} compiles, {compile_s:.1f} s (inside 'cases')")
    lines.append(f"cases capped by the time budget: {capped}")
    if cases:
        lines.append("slowest cases: " + "; ".join(f"{s:.2f} s {label}" for s, label in sorted(cases)[::-1][:8]))
    other = {k: v for k, v in stages.items() if k not in ("calibration",)}
    if other:
        lines.append("other checks by id suffix (summed): " + ", ".join(
            f"{k} {v:.1f} s" for k, v in sorted(other.items(), key=lambda kv: -kv[1])[:8]))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--json", type=Path, default=None, help="write the rows and the profile here")
    parser.add_argument("--modes", default=",".join(MODES), help=f"which of {','.join(MODES)} to run")
    parser.add_argument("--fresh-gpu-caches", action="store_true",
                        help="an empty Triton cache and FlagGems database for the naive loop and for the one run")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per opgate call")
    parser.add_argument("extra", nargs="*", help="arguments for every opgate verify (after --)")
    args, unknown = parser.parse_known_args()  # `-- --budget quick`: argparse leaves options after -- unknown
    args.extra = [a for a in [*args.extra, *unknown] if a != "--"]
    try:
        modes = parse_modes(args.modes)
    except ValueError as exc:
        print(f"verify_library.py: {exc}", file=sys.stderr)
        return 2
    if not args.folder.is_dir():
        print(f"verify_library.py: {args.folder}: not a folder; give the folder of spec files", file=sys.stderr)
        return 2
    from opgate.verify.spec_files import specs_in_folder

    rows: list[dict[str, Any]] = []
    lines: list[str] = []
    rerun_lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="opgate-library-") as tmp:
        tmp_path = Path(tmp)
        import shutil

        folder = tmp_path / "library"
        shutil.copytree(args.folder, folder, ignore=shutil.ignore_patterns("__pycache__"))
        specs = [str(p) for p in specs_in_folder(folder)]
        if not specs:
            print(f"verify_library.py: {args.folder}: no spec files in it", file=sys.stderr)
            return 2

        def gpu_caches(name: str) -> Path | None:
            return tmp_path / f"gpu-{name}" if args.fresh_gpu_caches else None

        if "naive" in modes:
            cache = tmp_path / "cache-naive"
            started = time.perf_counter()
            merged: dict[str, str] = {}
            worst: Any = 0
            for k, spec in enumerate(specs):
                run = _run([spec], tmp_path / f"naive-{k}.json", cache, args.extra, args.timeout, verdicts=False,
                           gpu_caches=gpu_caches("naive"))
                merged.update(_outcomes(run["report"]))
                worst = run["exit"] if not isinstance(run["exit"], int) or not isinstance(worst, int) else max(
                    worst, run["exit"])
            rows.append({"mode": "naive loop", "wall_s": time.perf_counter() - started, "exit": worst,
                         "outcomes": merged})
        if "one" in modes:
            cache, one_caches = tmp_path / "cache-one-run", gpu_caches("one")
            first = _run([str(folder)], tmp_path / "one.json", cache, args.extra, args.timeout, gpu_caches=one_caches)
            rows.append({"mode": "one run (cold cache)", "wall_s": first["wall_s"], "exit": first["exit"],
                         "outcomes": _outcomes(first["report"]), "tail": first["tail"]})
            lines = profile(first["report"]) if first["report"] else [f"no report: {first['tail']}"]
        if "again" in modes:
            again = _run([str(folder)], tmp_path / "again.json", cache, args.extra, args.timeout, verdicts=False,
                         gpu_caches=one_caches)
            rows.append({"mode": "re-run, bound cache only", "wall_s": again["wall_s"], "exit": again["exit"],
                         "outcomes": _outcomes(again["report"]), "tail": again["tail"]})
            rerun_lines = profile(again["report"]) if again["report"] else [f"no report: {again['tail']}"]
        if "reused" in modes:
            reused = _run([str(folder)], tmp_path / "reused.json", cache, args.extra, args.timeout,
                          gpu_caches=one_caches)
            rows.append({"mode": "re-run, verdicts reused", "wall_s": reused["wall_s"], "exit": reused["exit"],
                         "outcomes": _outcomes(reused["report"]), "tail": reused["tail"]})
        if "edited" in modes:
            edited = Path(specs[0])
            edited.write_text(edited.read_text() + "\n# edited\n")
            one_edit = _run([str(folder)], tmp_path / "edited.json", cache, args.extra, args.timeout,
                            gpu_caches=one_caches)
            judged = len(((one_edit["report"] or {}).get("extra", {}).get("verdict_cache") or {}).get("judged", []))
            rows.append({"mode": f"one file edited ({judged} judged)", "wall_s": one_edit["wall_s"],
                         "exit": one_edit["exit"], "outcomes": _outcomes(one_edit["report"]),
                         "tail": one_edit["tail"]})

    print(f"{len(specs)} spec files under {args.folder}; verify args: {' '.join(args.extra) or '(defaults)'}")
    print(f"{'mode':28s} {'wall s':>8s} {'exit':>6s} {'checks':>7s}  outcomes")
    reference = next((r for r in rows if r["mode"].startswith("one run")), rows[0])["outcomes"]
    for row in rows:
        counts = Counter(row["outcomes"].values())
        print(f"{row['mode']:28s} {row['wall_s']:8.1f} {str(row['exit']):>6s} {len(row['outcomes']):7d}  "
              + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for row in rows:
        if row["outcomes"] is not reference:
            differ = sorted(k for k in set(reference) | set(row["outcomes"])
                            if reference.get(k) != row["outcomes"].get(k) and not k.endswith(".calibration"))
            print(f"{row['mode']} vs one run: {'same outcome for every check' if not differ else differ[:10]}")
    if lines:
        print("\nprofile of the one run:")
        for line in lines:
            print("  " + line)
    if rerun_lines:
        print("profile of the re-run:")
        for line in rerun_lines:
            print("  " + line)
    if args.json:
        args.json.write_text(json.dumps({"rows": [{k: v for k, v in r.items()} for r in rows],
                                         "profile": lines, "rerun_profile": rerun_lines}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
